package upstream

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine"
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
