package engine

import (
	"context"
	"testing"
)

// TestPipeLogprobs: logprobs accumulate beside their tokens, one per token.
func TestPipeLogprobs(t *testing.T) {
	p := NewPipe(context.Background())
	p.Send(Delta{Tokens: []Token{1}, Logprobs: []TokenLogprob{{Token: 1, Logprob: -0.5}}})
	p.Send(Delta{Tokens: []Token{2}, Logprobs: []TokenLogprob{{Token: 2, Logprob: -1, Top: []TopLogprob{{Token: 2, Logprob: -1}}}}, Finish: FinishStop})
	d, err := p.Recv()
	if err != nil || len(d.Tokens) != 2 || len(d.Logprobs) != 2 || d.Logprobs[1].Top[0].Token != 2 {
		t.Fatalf("%+v %v", d, err)
	}
}
