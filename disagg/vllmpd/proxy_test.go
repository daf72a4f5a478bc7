package vllmpd

import (
	"context"
	"io"
	"testing"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
	"github.com/tandemllm/tandem/engine/routed"
)

// TestProxySkipsCachedPrompts: in auto mode a prompt the router predicts
// the decode worker caches whole takes no prefill leg; a partial
// prediction, no prediction, or always mode does.
func TestProxySkipsCachedPrompts(t *testing.T) {
	prompt := make([]engine.Token, 100) // 6 whole blocks of 16 before the last token
	tests := []struct {
		name      string
		always    bool
		predicted int // routed.Request.PredictedCachedTokens, as dispatch sets it
		wantLeg   bool
	}{
		{"no prediction (load-only policy)", false, 0, true},
		{"partly cached", false, 80, true},
		{"whole blocks cached", false, 96, false},
		{"always", true, 96, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pre := &enginetest.Scripted{Name: "m", Output: []engine.Token{1}}
			dec := &enginetest.Scripted{Name: "m", Output: []engine.Token{2}}
			p := NewProxy(ProxyConfig{Always: tc.always})
			p.AddPrefill("p0", pre)
			g := p.Wrap("d0", dec, 16)
			st, err := routed.Generate(context.Background(), g, routed.Request{Req: &engine.Request{Prompt: prompt, MaxTokens: 2}, PredictedCachedTokens: tc.predicted})
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
