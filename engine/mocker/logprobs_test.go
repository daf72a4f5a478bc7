package mocker

import (
	"context"
	"math"
	"reflect"
	"testing"

	"github.com/tandemllm/tandem/engine"
)

func logprobRun(t *testing.T, e *Engine, req engine.Request) ([]engine.Token, []engine.TokenLogprob) {
	t.Helper()
	st, err := e.Generate(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	var toks []engine.Token
	var lps []engine.TokenLogprob
	for {
		d, err := st.Recv()
		if err != nil {
			return toks, lps
		}
		if req.Logprobs && len(d.Logprobs) != len(d.Tokens) {
			t.Fatalf("%d logprobs for %d tokens", len(d.Logprobs), len(d.Tokens))
		}
		toks, lps = append(toks, d.Tokens...), append(lps, d.Logprobs...)
	}
}

// TestSyntheticLogprobs: the mocker's made-up logprobs are one per token,
// deterministic, well-formed (the chosen token first and most likely,
// distinct alternatives in order, probabilities summing to at most 1), and
// absent unless asked for.
func TestSyntheticLogprobs(t *testing.T) {
	e := newTest(t, Config{Instant: true})
	req := engine.Request{Prompt: prompt(1, 20), MaxTokens: 8, IgnoreEOS: true, Logprobs: true, TopLogprobs: 4}
	toks, lps := logprobRun(t, e, req)
	if len(toks) != 8 || len(lps) != 8 {
		t.Fatalf("%d tokens, %d logprobs", len(toks), len(lps))
	}
	for i, lp := range lps {
		if lp.Token != toks[i] || lp.Logprob >= 0 || lp.Logprob < float32(math.Log(0.5))-1e-6 {
			t.Fatalf("position %d: %+v", i, lp)
		}
		if len(lp.Top) != 4 || lp.Top[0].Token != lp.Token || lp.Top[0].Logprob != lp.Logprob {
			t.Fatalf("position %d: alternatives %+v", i, lp.Top)
		}
		sum, seen := 0.0, map[engine.Token]bool{}
		for k, alt := range lp.Top {
			if seen[alt.Token] || (k > 0 && alt.Logprob >= lp.Top[k-1].Logprob) {
				t.Fatalf("position %d: alternatives %+v", i, lp.Top)
			}
			seen[alt.Token] = true
			sum += math.Exp(float64(alt.Logprob))
		}
		if sum > 1+1e-6 {
			t.Fatalf("position %d: probabilities sum to %v", i, sum)
		}
	}
	if _, again := logprobRun(t, e, req); !reflect.DeepEqual(again, lps) {
		t.Fatal("the same request gave other logprobs")
	}
	req.Logprobs = false
	if _, none := logprobRun(t, e, req); none != nil {
		t.Fatalf("logprobs without asking: %v", none)
	}
}
