package upstream

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/upstream/standin"
)

// TestConstraintWireShapes: each dialect's fields for each constraint kind,
// and the refusals that name the request field.
func TestConstraintWireShapes(t *testing.T) {
	schema := &engine.Constraint{Kind: engine.ConstraintJSONSchema, Spec: `{"type":"object"}`, Field: "response_format"}
	regex := &engine.Constraint{Kind: engine.ConstraintRegex, Spec: `a+`, Field: "structured_outputs.regex"}
	choice := &engine.Constraint{Kind: engine.ConstraintChoice, Spec: `["a.b","c"]`, Field: "structured_outputs.choice"}
	tools := &engine.Constraint{Kind: engine.ConstraintToolCalls, Spec: `{}`, Field: "tool_choice"}
	enc := func(v any) string { b, _ := json.Marshal(v); return string(b) }

	cases := []struct {
		name string
		got  func() (string, error)
		want string // substring of the body, or of the error
		err  bool
	}{
		{"vllm json", func() (string, error) {
			var b body
			err := (&Engine{cfg: Config{API: APIVLLM}}).vllmConstraint(&b, schema)
			return enc(b), err
		}, `"structured_outputs":{"json":{"type":"object"}}`, false},
		{"vllm guided regex", func() (string, error) {
			var b body
			err := (&Engine{cfg: Config{API: APIVLLM, GuidedFields: true}}).vllmConstraint(&b, regex)
			return enc(b), err
		}, `"guided_regex":"a+"`, false},
		{"vllm choice", func() (string, error) {
			var b body
			err := (&Engine{cfg: Config{API: APIVLLM}}).vllmConstraint(&b, choice)
			return enc(b), err
		}, `"structured_outputs":{"choice":["a.b","c"]}`, false},
		{"openai refuses", func() (string, error) {
			var b body
			err := (&Engine{cfg: Config{API: APIOpenAI}}).vllmConstraint(&b, schema)
			return "", err
		}, "response_format", true},
		{"vllm tool calls refused", func() (string, error) {
			var b body
			err := (&Engine{cfg: Config{API: APIVLLM}}).vllmConstraint(&b, tools)
			return "", err
		}, "tool_choice", true},
		{"sglang json", func() (string, error) {
			var p sglangSampling
			err := sglangConstraint(&p, schema)
			return enc(p), err
		}, `"json_schema":"{\"type\":\"object\"}"`, false},
		{"sglang choice", func() (string, error) {
			var p sglangSampling
			err := sglangConstraint(&p, choice)
			return enc(p), err
		}, `"regex":"(a\\.b|c)"`, false},
		{"llama json", func() (string, error) {
			var b llamaBody
			err := llamaConstraint(&b, schema)
			return enc(b), err
		}, `"json_schema":{"type":"object"}`, false},
		{"llama choice", func() (string, error) {
			var b llamaBody
			err := llamaConstraint(&b, choice)
			return enc(b), err
		}, `"grammar":"root ::= \"a.b\" | \"c\""`, false},
		{"llama regex refused", func() (string, error) {
			var b llamaBody
			return "", llamaConstraint(&b, regex)
		}, "structured_outputs.regex", true},
	}
	for _, tc := range cases {
		got, err := tc.got()
		if tc.err {
			if !errors.Is(err, engine.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err != nil || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %s (%v), want %s", tc.name, got, err, tc.want)
		}
	}
}

// TestConstraintFieldsStandIns: each constraint kind an upstream can
// carry goes through the adapter to the SGLang and llama-server
// look-alikes, which take the fields the real servers take (SGLang:
// sampling_params json_schema as a string, regex, ebnf, at most one;
// llama-server: json_schema as an object, grammar); SGLang's refusals of
// two grammars and of a schema object come back as 400s.
func TestConstraintFieldsStandIns(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sg, err := standin.StartSGLang(standin.SGLangOptions{Model: "m", Mocker: sglangMocker()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sg.Close() })
	lc, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "m.gguf", Slots: 1, NCtx: 4096, SlotSimilarity: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	constraints := []*engine.Constraint{
		{Kind: engine.ConstraintJSONSchema, Spec: `{"type":"object"}`},
		{Kind: engine.ConstraintJSONObject},
		{Kind: engine.ConstraintRegex, Spec: `a+`},
		{Kind: engine.ConstraintChoice, Spec: `["a","b"]`},
		{Kind: engine.ConstraintGrammar, Spec: `root ::= "a"`},
	}
	for _, api := range []string{APISGLang, APILlamaCpp} {
		url := sg.URL()
		if api == APILlamaCpp {
			url = lc.URL()
		}
		e, err := New(t.Context(), Config{URL: url, API: api, BlockSize: 16, HealthInterval: -1, MetricsInterval: -1, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		for _, c := range constraints {
			st, err := e.Generate(t.Context(), &engine.Request{ID: "r", Prompt: []engine.Token{1, 2, 3}, MaxTokens: 2, Constraint: c})
			if api == APILlamaCpp && c.Kind == engine.ConstraintRegex {
				if !errors.Is(err, engine.ErrInvalidRequest) {
					t.Errorf("%s %s: %v, want a refusal", api, c.Kind, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s %s: %v", api, c.Kind, err)
			}
			if _, last := drain(t, st); last.Finish == engine.FinishNone {
				t.Errorf("%s %s: no finish", api, c.Kind)
			}
		}
	}
	for _, tc := range []struct{ sp, want string }{
		{`{"json_schema":"{}","regex":"a"}`, "Only one of regex, json_schema, or ebnf can be set."},
		{`{"regex":"a","ebnf":"root ::= \"a\""}`, "Only one of regex, json_schema, or ebnf can be set."},
		{`{"json_schema":{"type":"object"}}`, "json_schema"},
	} {
		resp, err := http.Post(sg.URL()+"/generate", "application/json",
			strings.NewReader(`{"input_ids":[1,2,3],"sampling_params":`+tc.sp+`}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s: %d %s", tc.sp, resp.StatusCode, body)
		}
	}
}
