package httpapi

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/chatparse"
	"github.com/tandemllm/tandem/openai"
	"github.com/tandemllm/tandem/structured"
	"github.com/tandemllm/tandem/tokenid"
)

// TestForcedToolCallFormats: a forced tool call is constrained to the
// syntax of the model's tool-call parser (Hermes, Llama 3.1 JSON,
// Mistral's [TOOL_CALLS]), and what the constraint lets a model write
// (random walks of a byte vocabulary) that parser reads back as calls of
// the request's tools with JSON object arguments, never as text; a
// parser whose syntax the constraint cannot write is refused naming
// tool_choice.
func TestForcedToolCallFormats(t *testing.T) {
	toks := make([][]byte, 257)
	for i := range 256 {
		toks[i] = []byte{byte(i)}
	}
	eos := tokenid.ID(256)
	v, err := structured.NewVocab(toks, []tokenid.ID{eos})
	if err != nil {
		t.Fatal(err)
	}
	spec := openai.ToolCallsSpec{Tools: []openai.ToolCallTool{
		{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","maxLength":6},"unit":{"enum":["c","f"]}},"required":["city","unit"],"additionalProperties":false}`)},
		{Name: "now"},
	}}
	for _, tc := range []struct {
		parser string
		single bool
	}{
		{"hermes", false}, {"qwen", true}, {"llama3_json", false}, {"llama3_json", true}, {"mistral", false}, {"mistral", true},
	} {
		spec.Single = tc.single
		b, _ := json.Marshal(spec)
		c := &openai.Constraint{Kind: structured.KindToolCalls, Spec: string(b), Field: "tool_choice"}
		plan := &chatPlan{}
		plan.opts.ToolParser = tc.parser
		c, e := toolCallsFormat(c, plan)
		if e != nil {
			t.Fatalf("%s: %v", tc.parser, e)
		}
		if _, e := checkConstraint(c); e != nil {
			t.Fatalf("%s: %v", tc.parser, e)
		}
		comp, err := structured.Shared.Get(c.Kind, c.Spec, v)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, uint64(len(tc.parser))))
		done := 0
		for walk := range 20 {
			m := comp.NewMatcher()
			var out []byte
			for range 4000 {
				id, err := m.Pick(rng.Uint64())
				if err != nil {
					t.Fatal(err)
				}
				if err := m.Accept(id); err != nil {
					t.Fatal(err)
				}
				if m.Done() {
					break
				}
				out = append(out, v.Token(id)...)
			}
			if !m.Done() {
				continue
			}
			done++
			p, err := chatparse.New(chatparse.Options{ToolParser: tc.parser})
			if err != nil {
				t.Fatal(err)
			}
			var res chatparse.Collector
			res.Add(p.Feed(string(out)))
			res.Add(p.Flush())
			if strings.TrimSpace(res.Content) != "" || len(res.Calls) == 0 || tc.single && len(res.Calls) != 1 {
				t.Fatalf("%s walk %d: %q parsed as content %q, calls %+v", tc.parser, walk, out, res.Content, res.Calls)
			}
			for _, call := range res.Calls {
				var args map[string]any
				if call.Name != "get_weather" && call.Name != "now" || json.Unmarshal([]byte(call.Arguments), &args) != nil {
					t.Fatalf("%s: %q: call %+v", tc.parser, out, call)
				}
			}
		}
		if done < 10 {
			t.Fatalf("%s: %d of 20 walks ended", tc.parser, done)
		}
	}
	c := &openai.Constraint{Kind: structured.KindToolCalls, Spec: `{"tools":[{"name":"now"}]}`, Field: "tool_choice"}
	plan := &chatPlan{}
	plan.opts.ToolParser = "qwen3_coder"
	c, e := toolCallsFormat(c, plan)
	if e == nil {
		_, e = checkConstraint(c)
	}
	if e == nil || e.Param != "tool_choice" || !strings.Contains(e.Message, "qwen3_coder") {
		t.Fatalf("qwen3_coder: %+v", e)
	}
}
