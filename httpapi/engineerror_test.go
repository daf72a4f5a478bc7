package httpapi

import (
	"fmt"
	"testing"

	"github.com/tandemllm/tandem/engine"
)

type promptOnly struct{ error }

func (promptOnly) PromptTooLong() bool { return true }
func (p promptOnly) Unwrap() error     { return p.error }

// TestEngineErrorParam: an engine's refusal of the prompt's own length
// (an upstream server's context) used to be labelled param max_tokens;
// it now names the prompt's field, and only a prompt-plus-output refusal
// names max_tokens.
func TestEngineErrorParam(t *testing.T) {
	s := &Server{}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{promptOnly{fmt.Errorf("x: %w", engine.ErrPromptTooLong)}, "messages"},
		{fmt.Errorf("wrapped: %w", promptOnly{fmt.Errorf("x: %w", engine.ErrPromptTooLong)}), "messages"},
		{fmt.Errorf("x: %w", engine.ErrPromptTooLong), "max_tokens"},
	} {
		e := s.engineError(tc.err, "messages")
		if e.Param != tc.want {
			t.Fatalf("%v: param %v, want %s", tc.err, e.Param, tc.want)
		}
	}
}
