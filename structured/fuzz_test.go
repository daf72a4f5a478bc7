package structured

import (
	"testing"

	"github.com/tandemllm/tandem/tokenid"
)

// FuzzCompile: any schema, regex or grammar text compiles or is refused,
// never panics or loops; what compiles matches inputs without panicking.
func FuzzCompile(f *testing.F) {
	for _, s := range walkSchemas {
		f.Add(uint8(0), s, "x")
	}
	f.Add(uint8(1), `[a-c]+\d{2,3}`, "ab12")
	f.Add(uint8(2), "root ::= \"a\" b*\nb ::= [0-9] | \"(\" root \")\"", "a1(a)")
	f.Add(uint8(0), `{"anyOf":[{"$ref":"#"},{"type":"null"}]}`, "null")
	f.Fuzz(func(t *testing.T, kind uint8, spec, input string) {
		if len(spec) > 4096 {
			return
		}
		var g *Grammar
		var err error
		switch kind % 3 {
		case 0:
			g, err = CompileJSONSchema([]byte(spec))
		case 1:
			g, err = CompileRegex(spec)
		case 2:
			g, err = CompileGBNF(spec)
		}
		if err != nil {
			return
		}
		g.MatchString(input)
	})
}

// FuzzMaskWalk: over a small vocabulary, the mask and Accept agree token
// by token along a walk, EOS is in the mask exactly in accepting states,
// and a finished walk's text matches the grammar.
func FuzzMaskWalk(f *testing.F) {
	f.Add(`{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Add(`{"type":"array","items":{"enum":["x","yz"]},"maxItems":3}`, []byte{9, 8, 7})
	f.Fuzz(func(t *testing.T, schema string, choices []byte) {
		if len(schema) > 2048 || len(choices) > 256 {
			return
		}
		g, err := CompileJSONSchema([]byte(schema))
		if err != nil {
			return
		}
		toks := [][]byte{nil, []byte(`{`), []byte(`}`), []byte(`"`), []byte(`"a"`), []byte(`":`), []byte(`1`), []byte(`0`),
			[]byte(`-`), []byte(`,`), []byte(`[`), []byte(`]`), []byte(`"}`), []byte(`x`), []byte(`yz`), []byte(`null`),
			[]byte(`true`), []byte(`false`), []byte(`.`), []byte(` `), []byte(`": `), []byte(`"x","`), []byte(`é`), []byte{0xff}}
		v, err := NewVocab(toks, []tokenid.ID{0})
		if err != nil {
			t.Fatal(err)
		}
		c := Bind(g, v)
		m := c.NewMatcher()
		var out []byte
		for _, ch := range choices {
			mask, err := m.Mask()
			if err != nil {
				return // state budget
			}
			var allowed []tokenid.ID
			for id := range toks {
				in := mask[id>>6]&(1<<(uint(id)&63)) != 0
				if in != m.Allowed(tokenid.ID(id)) {
					t.Fatalf("token %q: mask %v, Allowed %v after %q", toks[id], in, !in, out)
				}
				if in {
					allowed = append(allowed, tokenid.ID(id))
				}
			}
			if (mask[0]&1 != 0) != m.CanEnd() {
				t.Fatalf("EOS in mask %v, CanEnd %v after %q", mask[0]&1 != 0, m.CanEnd(), out)
			}
			if len(allowed) == 0 {
				return // nothing in this small vocabulary continues
			}
			id := allowed[int(ch)%len(allowed)]
			if err := m.Accept(id); err != nil {
				t.Fatalf("accept %q: %v", toks[id], err)
			}
			if m.Done() {
				if !g.MatchString(string(out)) {
					t.Fatalf("ended on %q, which the grammar does not match", out)
				}
				return
			}
			out = append(out, toks[id]...)
		}
	})
}
