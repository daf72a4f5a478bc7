package httpapi

import (
	"encoding/json"
	"testing"

	"github.com/tandemllm/tandem/openai"
)

// TestTemplateKwargsReasoningEffort: reasoning_effort reaches the template
// (gpt-oss's reads it) unless chat_template_kwargs sets it.
func TestTemplateKwargsReasoningEffort(t *testing.T) {
	low := "low"
	for _, c := range []struct {
		kw   map[string]json.RawMessage
		eff  *string
		want string
	}{
		{nil, nil, ""},
		{nil, &low, `"low"`},
		{map[string]json.RawMessage{"reasoning_effort": json.RawMessage(`"high"`)}, &low, `"high"`},
		{map[string]json.RawMessage{"enable_thinking": json.RawMessage(`false`)}, &low, `"low"`},
	} {
		req := &openai.ChatRequest{ChatTemplateKwargs: c.kw, ReasoningEffort: c.eff}
		got := templateKwargs(req)
		if string(got["reasoning_effort"]) != c.want {
			t.Errorf("%v %v: reasoning_effort %s, want %s", c.kw, c.eff, got["reasoning_effort"], c.want)
		}
		if c.kw != nil && len(got) < len(c.kw) {
			t.Errorf("lost kwargs: %v", got)
		}
	}
}
