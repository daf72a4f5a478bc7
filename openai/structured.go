package openai

import (
	"bytes"
	"encoding/json"
)

// JSONSchemaFormat is response_format.json_schema.
type JSONSchemaFormat struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema"`
	Strict      *bool           `json:"strict,omitempty"`
}

// StructuredOutputs is vLLM's structured_outputs request extension
// (vllm/sampling_params.py StructuredOutputsParams: json, regex, choice,
// grammar, json_object; exactly one may be set).
type StructuredOutputs struct {
	JSON       json.RawMessage `json:"json"`
	Regex      *string         `json:"regex"`
	Choice     []string        `json:"choice"`
	Grammar    *string         `json:"grammar"`
	JSONObject *bool           `json:"json_object"`
}

// Guided is vLLM's older guided decoding fields (before
// structured_outputs): guided_json, guided_regex, guided_choice,
// guided_grammar.
type Guided struct {
	GuidedJSON    json.RawMessage `json:"guided_json"`
	GuidedRegex   *string         `json:"guided_regex"`
	GuidedChoice  []string        `json:"guided_choice"`
	GuidedGrammar *string         `json:"guided_grammar"`
}

// Constraint is a request's structured-output constraint as the frontend
// hands it to engines: Kind is one of json, json_object, regex, choice,
// grammar, tool_calls; Field the request field it came from.
type Constraint struct {
	Kind  string
	Spec  string
	Field string
}

// maxConstraintSpec bounds a schema, regex or grammar's size.
const maxConstraintSpec = 1 << 20

func isNull(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || bytes.Equal(b, []byte("null"))
}

// constraint collects the constraint of response_format, structured_outputs
// and the guided_* fields; more than one is a 400.
func constraintOf(rf *ResponseFormat, s *Sampling) (*Constraint, *Error) {
	var out []*Constraint
	add := func(kind, spec, field string) *Error {
		if len(spec) > maxConstraintSpec {
			return BadRequest(field, "invalid_value", "%s is %d bytes (limit %d)", field, len(spec), maxConstraintSpec)
		}
		out = append(out, &Constraint{Kind: kind, Spec: spec, Field: field})
		return nil
	}
	if rf != nil {
		switch rf.Type {
		case "", "text":
		case "json_object":
			_ = add("json_object", "", "response_format")
		case "json_schema":
			if rf.JSONSchema == nil || isNull(rf.JSONSchema.Schema) {
				// OpenAI requires a schema; an absent one means any JSON
				// object here, as vLLM treats it.
				_ = add("json_object", "", "response_format.json_schema")
			} else if e := add("json", string(rf.JSONSchema.Schema), "response_format.json_schema.schema"); e != nil {
				return nil, e
			}
		default:
			return nil, BadRequest("response_format.type", "unsupported_value", "response_format type %q is not supported (text, json_object, json_schema)", rf.Type)
		}
	}
	if so := s.StructuredOutputs; so != nil {
		n := len(out)
		if !isNull(so.JSON) {
			spec := so.JSON
			// A schema may come as a JSON string holding it.
			var str string
			if json.Unmarshal(spec, &str) == nil {
				spec = json.RawMessage(str)
			}
			if e := add("json", string(spec), "structured_outputs.json"); e != nil {
				return nil, e
			}
		}
		if so.Regex != nil {
			if e := add("regex", *so.Regex, "structured_outputs.regex"); e != nil {
				return nil, e
			}
		}
		if so.Choice != nil {
			b, _ := json.Marshal(so.Choice)
			if e := add("choice", string(b), "structured_outputs.choice"); e != nil {
				return nil, e
			}
		}
		if so.Grammar != nil {
			if e := add("grammar", *so.Grammar, "structured_outputs.grammar"); e != nil {
				return nil, e
			}
		}
		if so.JSONObject != nil && *so.JSONObject {
			_ = add("json_object", "", "structured_outputs.json_object")
		}
		if len(out)-n > 1 {
			return nil, BadRequest("structured_outputs", "invalid_value", "structured_outputs takes exactly one of json, regex, choice, grammar, json_object")
		}
	}
	g := s.Guided
	if !isNull(g.GuidedJSON) {
		spec := g.GuidedJSON
		var str string
		if json.Unmarshal(spec, &str) == nil {
			spec = json.RawMessage(str)
		}
		if e := add("json", string(spec), "guided_json"); e != nil {
			return nil, e
		}
	}
	if g.GuidedRegex != nil {
		if e := add("regex", *g.GuidedRegex, "guided_regex"); e != nil {
			return nil, e
		}
	}
	if g.GuidedChoice != nil {
		b, _ := json.Marshal(g.GuidedChoice)
		if e := add("choice", string(b), "guided_choice"); e != nil {
			return nil, e
		}
	}
	if g.GuidedGrammar != nil {
		if e := add("grammar", *g.GuidedGrammar, "guided_grammar"); e != nil {
			return nil, e
		}
	}
	switch len(out) {
	case 0:
		return nil, nil
	case 1:
		return out[0], nil
	}
	return nil, BadRequest(out[1].Field, "invalid_value", "only one structured-output constraint per request (%s and %s given)", out[0].Field, out[1].Field)
}

// ToolCallsSpec is the Spec of a tool_calls constraint (the structured
// package reads the same shape).
type ToolCallsSpec struct {
	Format string         `json:"format,omitempty"`
	Tools  []ToolCallTool `json:"tools"`
	Single bool           `json:"single,omitempty"`
}

// ToolCallTool is one function a forced call may name.
type ToolCallTool struct {
	Name       string          `json:"name"`
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

// toolConstraint is the constraint tool_choice asks for: "required" (one
// or more calls of any tool) or a named function (one call of it); nil for
// "auto", "none" or no tool_choice.
func toolConstraint(tools, choice json.RawMessage, parallel *bool) (*Constraint, *Error) {
	if isNull(choice) {
		return nil, nil
	}
	var mode string
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(choice, &mode) == nil {
		switch mode {
		case "auto", "none":
			return nil, nil
		case "required":
		default:
			return nil, BadRequest("tool_choice", "invalid_value", "tool_choice must be none, auto, required or a named function, got %q", mode)
		}
	} else if err := json.Unmarshal(choice, &named); err != nil || named.Type != "function" || named.Function.Name == "" {
		return nil, BadRequest("tool_choice", "invalid_value", `tool_choice must be none, auto, required or {"type":"function","function":{"name":...}}`)
	}
	if isNull(tools) {
		return nil, BadRequest("tool_choice", "invalid_value", "tool_choice %s needs tools", choice)
	}
	var list []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(tools, &list); err != nil {
		return nil, BadRequest("tools", "invalid_type", "tools: %v", err)
	}
	spec := ToolCallsSpec{Single: parallel != nil && !*parallel}
	for _, t := range list {
		if named.Function.Name != "" && t.Function.Name != named.Function.Name {
			continue
		}
		spec.Tools = append(spec.Tools, ToolCallTool{Name: t.Function.Name, Parameters: t.Function.Parameters})
	}
	if len(spec.Tools) == 0 {
		return nil, BadRequest("tool_choice", "invalid_value", "tool_choice names function %q, which is not in tools", named.Function.Name)
	}
	if named.Function.Name != "" {
		spec.Single = true
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, BadRequest("tools", "invalid_value", "tools: %v", err)
	}
	if len(b) > maxConstraintSpec {
		return nil, BadRequest("tools", "invalid_value", "tools are %d bytes (limit %d)", len(b), maxConstraintSpec)
	}
	return &Constraint{Kind: "tool_calls", Spec: string(b), Field: "tool_choice"}, nil
}

// chatConstraint is the chat request's one constraint.
func (r *ChatRequest) chatConstraint() (*Constraint, *Error) {
	c, e := constraintOf(r.ResponseFormat, &r.Sampling)
	if e != nil {
		return nil, e
	}
	tc, e := toolConstraint(r.Tools, r.ToolChoice, r.ParallelToolCalls)
	if e != nil {
		return nil, e
	}
	if tc != nil {
		if c != nil {
			return nil, BadRequest("tool_choice", "invalid_value", "tool_choice %s cannot be combined with %s", r.ToolChoice, c.Field)
		}
		return tc, nil
	}
	return c, nil
}

// VLLMToolSchema is the JSON Schema vLLM constrains a forced tool call
// with (vllm/entrypoints/openai/serving_chat.py, get_json_schema_from_tools):
// for a named function its parameters alone; for "required" an array of at
// least one {"name": const, "parameters": schema} object (one with
// Single). An engine that takes JSON Schemas but not the tool_calls kind
// (an upstream) can force calls with it, read back by a parser of these
// shapes instead of the family's.
func VLLMToolSchema(spec *ToolCallsSpec, named bool) (string, error) {
	params := func(p json.RawMessage) json.RawMessage {
		if isNull(p) {
			return json.RawMessage(`{"type":"object"}`)
		}
		return p
	}
	if named && len(spec.Tools) == 1 {
		return string(params(spec.Tools[0].Parameters)), nil
	}
	items := make([]any, 0, len(spec.Tools))
	for _, t := range spec.Tools {
		items = append(items, map[string]any{
			"type": "object",
			"properties": map[string]any{
				"name":       map[string]any{"type": "string", "enum": []string{t.Name}},
				"parameters": params(t.Parameters),
			},
			"required": []string{"name", "parameters"},
		})
	}
	arr := map[string]any{"type": "array", "minItems": 1, "items": map[string]any{"anyOf": items}}
	if spec.Single {
		arr["maxItems"] = 1
	}
	b, err := json.Marshal(arr)
	return string(b), err
}
