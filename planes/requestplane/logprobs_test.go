package requestplane

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"testing"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	rpv1 "github.com/tandemllm/tandem/planes/requestplane/proto/tandem/requestplane/v1"
)

func drainLP(t *testing.T, g engine.Generator, req engine.Request) ([]engine.Token, []engine.TokenLogprob) {
	t.Helper()
	s, err := g.Generate(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	var toks []engine.Token
	var lps []engine.TokenLogprob
	for {
		d, err := s.Recv()
		if err == io.EOF {
			return toks, lps
		}
		if err != nil {
			t.Fatal(err)
		}
		toks, lps = append(toks, d.Tokens...), append(lps, d.Logprobs...)
	}
}

// TestLogprobsOverGRPC: a request's logprobs settings reach the worker's
// engine across the request plane, and the engine's logprobs come back
// whole: the same as the engine gives in process.
func TestLogprobsOverGRPC(t *testing.T) {
	eng, err := mocker.New(mocker.Config{Model: "m", Instant: true, Vocabulary: []engine.Token{10, 11, 12, 13, 14, 15}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	c := serve(t, eng)
	req := engine.Request{ID: "r", Model: "m", Prompt: []engine.Token{1, 2, 3, 4}, MaxTokens: 6, IgnoreEOS: true, Logprobs: true, TopLogprobs: 3}
	toks, lps := drainLP(t, c, req)
	wantToks, want := drainLP(t, eng, req)
	if len(lps) != 6 || !reflect.DeepEqual(toks, wantToks) || !reflect.DeepEqual(lps, want) {
		t.Fatalf("over the wire %v %+v\nin process %v %+v", toks, lps, wantToks, want)
	}
	if len(lps[0].Top) != 3 {
		t.Fatalf("alternatives %+v", lps[0].Top)
	}
	// Out of range is refused by the worker, not passed to its engine.
	req.TopLogprobs = 21
	if _, err := c.Generate(context.Background(), &req); err == nil {
		t.Fatal("top_logprobs 21 accepted")
	}
}

// TestDeltaLogprobsBounded: a worker may send at most one entry per token
// and engine.MaxTopLogprobs alternatives each.
func TestDeltaLogprobsBounded(t *testing.T) {
	top := make([]*rpv1.TopLogprob, engine.MaxTopLogprobs+1)
	for _, tc := range []struct {
		name string
		d    *rpv1.Delta
		ok   bool
	}{
		{"one per token", &rpv1.Delta{Tokens: []int32{1, 2}, Logprobs: []*rpv1.TokenLogprob{{Token: 1}, {Token: 2}}}, true},
		{"none", &rpv1.Delta{Tokens: []int32{1}}, true},
		{"more than the tokens", &rpv1.Delta{Tokens: []int32{1}, Logprobs: []*rpv1.TokenLogprob{{Token: 1}, {Token: 2}}}, false},
		{"too many alternatives", &rpv1.Delta{Tokens: []int32{1}, Logprobs: []*rpv1.TokenLogprob{{Token: 1, Top: top}}}, false},
	} {
		if err := checkDeltaLogprobs(tc.d); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
