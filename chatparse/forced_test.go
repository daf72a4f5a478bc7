package chatparse

import (
	"reflect"
	"testing"
)

// TestForcedShapes: under structured outputs a forced tool_choice makes the
// model write vLLM's shapes (vLLM's serving_chat: a named function's
// arguments object; for "required" the array of {"name", "parameters"}
// that get_json_schema_from_tools describes).
func TestForcedShapes(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
		in   string
		want Result
	}{
		{"named", Options{ForceName: "get_weather"}, `{"city": "Paris"}`,
			Result{Calls: []ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city": "Paris"}`}}}},
		{"named with reasoning", Options{ForceName: "get_weather", ReasoningParser: "qwen3"}, `<think>ok</think>{"city": "Oslo"}`,
			Result{Reasoning: "ok", Calls: []ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city": "Oslo"}`}}}},
		{"required", Options{ForceList: true}, `[{"name": "a", "parameters": {"x": 1}}, {"name": "b", "parameters": {}}]`,
			Result{Calls: []ToolCall{{ID: "call_1", Name: "a", Arguments: `{"x": 1}`}, {ID: "call_2", Name: "b", Arguments: `{}`}}}},
		{"required but not a list", Options{ForceList: true}, `no`, Result{Content: "no"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.o.NewID = seqID()
			got, err := Parse(c.o, c.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fillIDs(got), fillIDs(c.want)) {
				t.Fatalf("got %#v\nwant %#v", got, c.want)
			}
			for i := 0; i <= len(c.in); i++ {
				c.o.NewID = seqID()
				if got := fillIDs(streamed(t, c.o, c.in[:i], c.in[i:])); !reflect.DeepEqual(got, fillIDs(c.want)) {
					t.Fatalf("split at %d: got %#v", i, got)
				}
			}
		})
	}
}
