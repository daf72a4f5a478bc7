package openai

import "testing"

func TestDecodeConstraint(t *testing.T) {
	const msgs = `"model":"m","messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name, body        string
		kind, spec, field string
	}{
		{"none", `{` + msgs + `}`, "", "", ""},
		{"text", `{` + msgs + `,"response_format":{"type":"text"}}`, "", "", ""},
		{"json_object", `{` + msgs + `,"response_format":{"type":"json_object"}}`, "json_object", "", "response_format"},
		{"json_schema", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object"}}}}`, "json", `{"type":"object"}`, "response_format.json_schema.schema"},
		{"so regex", `{` + msgs + `,"structured_outputs":{"regex":"[0-9]+"}}`, "regex", "[0-9]+", "structured_outputs.regex"},
		{"so choice", `{` + msgs + `,"structured_outputs":{"choice":["a","b"]}}`, "choice", `["a","b"]`, "structured_outputs.choice"},
		{"so json string", `{` + msgs + `,"structured_outputs":{"json":"{\"type\":\"string\"}"}}`, "json", `{"type":"string"}`, "structured_outputs.json"},
		{"guided_grammar", `{` + msgs + `,"guided_grammar":"root ::= \"a\""}`, "grammar", `root ::= "a"`, "guided_grammar"},
		{"tool required", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"required"}`, "tool_calls", `{"tools":[{"name":"f","parameters":{"type":"object"}}]}`, "tool_choice"},
		{"tool named", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"g"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, "tool_calls", `{"tools":[{"name":"g"}],"single":true}`, "tool_choice"},
		{"tool auto", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto"}`, "", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, e := DecodeChat([]byte(tc.body))
			if e != nil {
				t.Fatal(e)
			}
			c := r.Constraint
			if tc.kind == "" {
				if c != nil {
					t.Fatalf("constraint %+v", c)
				}
				return
			}
			if c == nil || c.Kind != tc.kind || c.Spec != tc.spec || c.Field != tc.field {
				t.Fatalf("got %+v, want %s %s %s", c, tc.kind, tc.spec, tc.field)
			}
		})
	}
	r, e := DecodeCompletion([]byte(`{"model":"m","prompt":"x","structured_outputs":{"choice":["y"]}}`))
	if e != nil || r.Constraint == nil || r.Constraint.Kind != "choice" {
		t.Fatalf("completions: %+v %v", r, e)
	}
}

func TestVLLMToolSchema(t *testing.T) {
	spec := &ToolCallsSpec{Tools: []ToolCallTool{{Name: "f", Parameters: []byte(`{"type":"object","properties":{"x":{"type":"integer"}}}`)}, {Name: "g"}}}
	got, err := VLLMToolSchema(spec, false)
	want := `{"items":{"anyOf":[{"properties":{"name":{"enum":["f"],"type":"string"},"parameters":{"type":"object","properties":{"x":{"type":"integer"}}}},"required":["name","parameters"],"type":"object"},{"properties":{"name":{"enum":["g"],"type":"string"},"parameters":{"type":"object"}},"required":["name","parameters"],"type":"object"}]},"minItems":1,"type":"array"}`
	if err != nil || got != want {
		t.Fatalf("%s %v", got, err)
	}
	one := &ToolCallsSpec{Tools: spec.Tools[:1]}
	if got, _ := VLLMToolSchema(one, true); got != `{"type":"object","properties":{"x":{"type":"integer"}}}` {
		t.Fatal(got)
	}
}
