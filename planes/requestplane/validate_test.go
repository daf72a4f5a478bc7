package requestplane

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
)

// Finding 7 of issue 12: a worker's Generate took token ids the frontend
// would refuse, and max_tokens of 2^63-1 wedged it. The request plane now
// checks what the frontend checks, answers with errors that keep their
// meaning across the wire (400s at the frontend, not 500s), and the worker
// keeps serving.
func TestWorkerRefusesWhatTheFrontendRefuses(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: []engine.Token{7}, Ctx: 4096}
	c := serveVocab(t, eng, nil, 1000)
	gen := func(r engine.Request) error {
		r.Model = "m"
		s, err := c.Generate(context.Background(), &r)
		if err != nil {
			return err
		}
		return drainAll(s.Recv)
	}
	for _, tc := range []struct {
		name string
		req  engine.Request
		want error
	}{
		{"negative id", engine.Request{Prompt: []engine.Token{1, -5}}, engine.ErrInvalidRequest},
		{"id past the vocabulary", engine.Request{Prompt: []engine.Token{999_999_999}}, engine.ErrInvalidRequest},
		{"negative stop id", engine.Request{Prompt: []engine.Token{1}, StopTokens: []engine.Token{-1}}, engine.ErrInvalidRequest},
		{"negative max tokens", engine.Request{Prompt: []engine.Token{1}, MaxTokens: -1}, engine.ErrInvalidRequest},
		{"max tokens 2^63-1", engine.Request{Prompt: []engine.Token{1}, MaxTokens: math.MaxInt64}, engine.ErrPromptTooLong},
		{"min tokens 2^63-1", engine.Request{Prompt: []engine.Token{1}, MinTokens: math.MaxInt64}, engine.ErrInvalidRequest},
		{"max tokens 2^30", engine.Request{Prompt: []engine.Token{1}, MaxTokens: 1 << 30}, engine.ErrPromptTooLong},
		{"min tokens past max", engine.Request{Prompt: []engine.Token{1}, MaxTokens: 2, MinTokens: 3}, engine.ErrInvalidRequest},
		{"empty prompt", engine.Request{}, engine.ErrInvalidRequest},
	} {
		if err := gen(tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if n := len(eng.Requests()); n != 0 {
		t.Fatalf("the engine saw %d refused requests", n)
	}
	if err := gen(engine.Request{Prompt: []engine.Token{1, 2}, MaxTokens: 3}); err != nil {
		t.Fatalf("the worker no longer serves: %v", err)
	}
}
