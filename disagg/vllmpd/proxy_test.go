package vllmpd

import (
	"context"
	"io"
	"testing"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
	"github.com/tandemllm/tandem/router"
)

// TestProxySkipsCachedPrompts: in auto mode a prompt the router predicts
// the decode worker caches whole takes no prefill leg; a partial
// prediction, a prediction for another worker, or always mode does.
func TestProxySkipsCachedPrompts(t *testing.T) {
	prompt := make([]engine.Token, 100) // 6 whole blocks of 16 before the last token
	tests := []struct {
		name     string
		always   bool
		decision *router.Decision
		wantLeg  bool
	}{
		{"no routing decision", false, nil, true},
		{"load-only policy", false, &router.Decision{WorkerID: "d0"}, true},
		{"partly cached", false, &router.Decision{WorkerID: "d0", PredictedCachedTokens: 80}, true},
		{"whole blocks cached", false, &router.Decision{WorkerID: "d0", PredictedCachedTokens: 96}, false},
		{"cached on another worker", false, &router.Decision{WorkerID: "d1", PredictedCachedTokens: 96}, true},
		{"always", true, &router.Decision{WorkerID: "d0", PredictedCachedTokens: 96}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pre := &enginetest.Scripted{Name: "m", Output: []engine.Token{1}}
			dec := &enginetest.Scripted{Name: "m", Output: []engine.Token{2}}
			p := NewProxy(ProxyConfig{Always: tc.always})
			p.AddPrefill("p0", pre)
			g := p.Wrap("d0", dec, 16)
			ctx := context.Background()
			if tc.decision != nil {
				ctx = router.WithDecision(ctx, *tc.decision)
			}
			st, err := g.Generate(ctx, &engine.Request{Prompt: prompt, MaxTokens: 2})
			if err != nil {
				t.Fatal(err)
			}
			for {
				if _, err := st.Recv(); err == io.EOF {
					break
				} else if err != nil {
					t.Fatal(err)
				}
			}
			if legs := pre.Started.Load(); (legs == 1) != tc.wantLeg || legs > 1 {
				t.Fatalf("%d prefill legs, want leg %v", legs, tc.wantLeg)
			}
			if dec.Started.Load() != 1 {
				t.Fatalf("%d decode legs", dec.Started.Load())
			}
		})
	}
}
