package structured

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tandemllm/tandem/internal/schematest"
	"github.com/tandemllm/tandem/internal/sharedfiles"
	"github.com/tandemllm/tandem/tokenid"
	"github.com/tandemllm/tandem/tokenizer"
)

// vocabOf builds a Vocab the way cmd/tandem does.
func vocabOf(t testing.TB, tok tokenizer.Tokenizer) *Vocab {
	n := tok.VocabSize()
	sp, _ := tok.(tokenizer.SpecialTokens)
	toks := make([][]byte, n)
	for id := range n {
		if sp != nil && sp.IsSpecial(tokenid.ID(id)) {
			continue
		}
		toks[id] = tok.AppendTokenBytes(nil, tokenid.ID(id))
	}
	v, err := NewVocab(toks, tok.EOS())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

var (
	o200kOnce  sync.Once
	o200kVocab *Vocab
	qwenOnce   sync.Once
	qwenVocab  *Vocab
)

func testO200k(t testing.TB) *Vocab {
	o200kOnce.Do(func() {
		m, err := tokenizer.Default()
		if err != nil {
			t.Fatal(err)
		}
		o200kVocab = vocabOf(t, m.Tokenizer)
	})
	return o200kVocab
}

// testQwen3 is the Qwen3 vocabulary, or a skip when its tokenizer is not
// on this machine (scripts/fetch-qwen3-tokenizer.sh fetches it).
func testQwen3(t testing.TB) *Vocab {
	qwenOnce.Do(func() {
		dir, err := sharedfiles.Qwen3Tokenizer()
		if err != nil {
			return
		}
		m, err := tokenizer.LoadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		qwenVocab = vocabOf(t, m.Tokenizer)
	})
	if qwenVocab == nil {
		t.Skip("no Qwen3 tokenizer (scripts/fetch-qwen3-tokenizer.sh fetches it)")
	}
	return qwenVocab
}

// walk samples one output uniformly among allowed tokens (the mocker's
// way), checking every token against the mask, up to limit tokens.
func walk(t testing.TB, c *Compiled, rng *rand.Rand, limit int) (string, bool) {
	m := c.NewMatcher()
	var out []byte
	for range limit {
		id, err := m.Pick(rng.Uint64())
		if err != nil {
			t.Fatalf("pick: %v after %q", err, out)
		}
		if err := m.Accept(id); err != nil {
			t.Fatalf("accept %d after %q: %v", id, out, err)
		}
		if m.Done() {
			return string(out), true
		}
		out = append(out, c.v.Token(id)...)
	}
	return string(out), false
}

var walkSchemas = []string{
	`{"type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":0,"maximum":150},"email":{"type":"string","format":"email"}},"required":["name","age","email"],"additionalProperties":false}`,
	`{"type":"object","properties":{"id":{"type":"string","format":"uuid"},"when":{"type":"string","format":"date-time"},"tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3},"score":{"type":"number","minimum":-1,"maximum":1}},"required":["id","when"],"additionalProperties":false}`,
	`{"type":"object","properties":{"kind":{"enum":["a","b"]},"value":{"anyOf":[{"type":"integer"},{"type":"null"},{"type":"boolean"}]},"code":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{2}$"}},"required":["kind","value","code"],"additionalProperties":false}`,
	`{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/node"}`,
	`{"type":"array","prefixItems":[{"type":"string","maxLength":4},{"const":42}],"items":false,"minItems":2}`,
}

func TestRandomWalksValidate(t *testing.T) {
	for _, vname := range []string{"o200k", "qwen3"} {
		t.Run(vname, func(t *testing.T) {
			var v *Vocab
			if vname == "o200k" {
				v = testO200k(t)
			} else {
				v = testQwen3(t)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for i, s := range walkSchemas {
				g, err := CompileJSONSchema([]byte(s))
				if err != nil {
					t.Fatalf("schema %d: %v", i, err)
				}
				c := Bind(g, v)
				sch := schematest.Compile(t, s)
				done := 0
				for range 3 {
					out, ok := walk(t, c, rng, 4000)
					if !ok {
						continue
					}
					done++
					inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(out)))
					if err != nil {
						t.Fatalf("schema %d: output does not parse: %v\n%s", i, err, out)
					}
					if err := sch.Validate(inst); err != nil {
						t.Fatalf("schema %d: output invalid: %v\n%s", i, err, out)
					}
				}
				if done == 0 {
					t.Errorf("schema %d: no walk ended within 4000 tokens", i)
				}
			}
		})
	}
}

func TestJSONObjectWalk(t *testing.T) {
	v := testO200k(t)
	g, err := CompileJSONObject()
	if err != nil {
		t.Fatal(err)
	}
	c := Bind(g, v)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5 {
		out, ok := walk(t, c, rng, 4000)
		if !ok {
			continue
		}
		var x map[string]any
		if err := json.Unmarshal([]byte(out), &x); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
}
