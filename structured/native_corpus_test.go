package structured_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/native"
	"github.com/tandemllm/tandem/internal/sharedfiles"
	"github.com/tandemllm/tandem/structured"
	"github.com/tandemllm/tandem/tokenid"
	"github.com/tandemllm/tandem/tokenizer"
)

// TestNativeCorpus: with TANDEM_SO_CORPUS_NATIVE=N (0: all), the first N
// schemas of the corpus through the native engine (a random-weight
// tiny-qwen3 model with the Qwen3 vocabulary, temperature 1): every output
// that ends (EOS) parses and validates; outputs cut at max_tokens are
// counted apart.
func TestNativeCorpus(t *testing.T) {
	nv := os.Getenv("TANDEM_SO_CORPUS_NATIVE")
	if nv == "" {
		t.Skip("set TANDEM_SO_CORPUS_NATIVE=N for the native corpus run")
	}
	limit, _ := strconv.Atoi(nv)
	tokDir, err := sharedfiles.Qwen3Tokenizer()
	if err != nil {
		t.Skip(err)
	}
	dir := filepath.Join(t.TempDir(), "m")
	if err := native.GenerateModel(dir, native.GenOptions{Shape: "tiny-qwen3", Seed: 1, HF: true, Tokenizer: tokDir}); err != nil {
		t.Fatal(err)
	}
	tm, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok := tm.Tokenizer
	sp, _ := tok.(tokenizer.SpecialTokens)
	toks := make([][]byte, tok.VocabSize())
	for id := range toks {
		if sp == nil || !sp.IsSpecial(tokenid.ID(id)) {
			toks[id] = tok.AppendTokenBytes(nil, tokenid.ID(id))
		}
	}
	vocab, err := structured.NewVocab(toks, tok.EOS())
	if err != nil {
		t.Fatal(err)
	}
	e, _, err := native.Load(dir, native.Options{Threads: 2, Vocab: vocab})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	prompt := tok.Encode("JSON:")
	corpus := structured.LoadCorpus(t)
	if limit > 0 && limit < len(corpus) {
		corpus = corpus[:limit]
	}
	var refused, valid, cut int
	for i, c := range corpus {
		req := &engine.Request{Prompt: prompt, MaxTokens: 480, Sampling: engine.Sampling{Temperature: 1, Seed: uint64(i), HasSeed: true},
			Constraint: &engine.Constraint{Kind: engine.ConstraintJSONSchema, Spec: string(c.Doc)}}
		s, err := e.Generate(context.Background(), req)
		if err != nil {
			if errors.Is(err, engine.ErrInvalidRequest) {
				refused++
				continue
			}
			t.Fatal(err)
		}
		var out []byte
		finish := engine.FinishNone
		for {
			d, err := s.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range d.Tokens {
				out = append(out, vocab.Token(id)...)
			}
			if d.Finish != engine.FinishNone {
				finish = d.Finish
			}
		}
		if finish != engine.FinishStop {
			cut++
			continue
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(c.Doc))
		if err != nil {
			t.Fatal(err)
		}
		vc := jsonschema.NewCompiler()
		vc.AssertFormat()
		vc.DefaultDraft(jsonschema.Draft4)
		if err := vc.AddResource("doc.json", doc); err != nil {
			t.Fatal(err)
		}
		sch, err := vc.Compile("doc.json")
		if err != nil {
			t.Fatal(err)
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(out))
		if err != nil {
			t.Errorf("%s: does not parse: %v\n%s", c.Name, err, out)
			continue
		}
		if err := sch.Validate(inst); err != nil {
			t.Errorf("%s: invalid: %v\n%s", c.Name, err, out)
			continue
		}
		valid++
	}
	t.Logf("native corpus %d schemas: %d refused, %d outputs validated, %d cut at max_tokens (480)", len(corpus), refused, valid, cut)
}
