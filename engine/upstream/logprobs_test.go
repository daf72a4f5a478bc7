package upstream_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/engine/upstream"
	"github.com/tandemllm/tandem/engine/upstream/standin"
)

func lpDrain(t *testing.T, g engine.Generator, req engine.Request) ([]engine.Token, []engine.TokenLogprob) {
	t.Helper()
	st, err := g.Generate(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	var toks []engine.Token
	var lps []engine.TokenLogprob
	for {
		d, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return toks, lps
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Logprobs) > len(d.Tokens) {
			t.Fatalf("%d logprobs for %d tokens", len(d.Logprobs), len(d.Tokens))
		}
		toks, lps = append(toks, d.Tokens...), append(lps, d.Logprobs...)
	}
}

// TestVLLMLogprobsPassThrough: the upstream engine asks a vLLM server for
// logprobs with return_tokens_as_token_ids and reads vLLM's completions
// logprobs back into the engine's entries; streamed or whole (a prefill
// leg), they equal what the mocker behind the stand-in computed.
func TestVLLMLogprobsPassThrough(t *testing.T) {
	mc := mocker.Config{Instant: true, Vocabulary: []engine.Token{20, 21, 22, 23, 24, 25, 26}, Logger: slog.New(slog.DiscardHandler)}
	srv, err := standin.Start(standin.Options{Model: "m", Mocker: mc, ReturnTokenIDs: true, PromptTokensDetails: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	e, err := upstream.New(t.Context(), upstream.Config{URL: srv.URL(), HealthInterval: -1, MetricsInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ref, err := mocker.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close() })

	req := engine.Request{ID: "r", Prompt: []engine.Token{1, 2, 3, 4, 5}, MaxTokens: 6, IgnoreEOS: true, Logprobs: true, TopLogprobs: 3}
	wantToks, want := lpDrain(t, ref, req)
	for _, tc := range []struct {
		name string
		kv   []byte
	}{{"streamed", nil}, {"whole (a prefill leg's response)", []byte(`{"do_remote_decode":true}`)}} {
		r := req
		r.KVTransferParams = tc.kv
		toks, lps := lpDrain(t, e, r)
		if !reflect.DeepEqual(toks, wantToks) || !reflect.DeepEqual(lps, want) {
			t.Fatalf("%s: got %v %+v\nwant %v %+v", tc.name, toks, lps, wantToks, want)
		}
	}
	// No logprobs asked for, none sent.
	r := req
	r.Logprobs, r.TopLogprobs = false, 0
	if _, lps := lpDrain(t, e, r); lps != nil {
		t.Fatalf("unasked logprobs %+v", lps)
	}
}

// TestStandinLogprobsShape: the stand-in answers vLLM's completions
// logprobs shape, "token_id:N" names with return_tokens_as_token_ids, and
// vLLM's refusal past --max-logprobs.
func TestStandinLogprobsShape(t *testing.T) {
	srv, err := standin.Start(standin.Options{Model: "m", Mocker: mocker.Config{Instant: true, Vocabulary: []engine.Token{20, 21, 22}, Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	resp, err := http.Post(srv.URL()+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"m","prompt":[1,2,3],"max_tokens":2,"logprobs":1,"return_tokens_as_token_ids":true}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`"tokens":["token_id:`, `"token_logprobs":[-`, `"top_logprobs":[{"token_id:`, `"text_offset":[0,0]`} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("%s lacks %s", b, want)
		}
	}
	resp, err = http.Post(srv.URL()+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":[1],"logprobs":21}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "greater than max allowed: 20") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// TestSGLangLogprobsPassThrough: the upstream engine asks SGLang's
// /generate for return_logprob and top_logprobs_num and reads meta_info's
// [logprob, token_id, text] entries back, in both stream modes (every
// chunk carrying all output so far, or only the new part).
func TestSGLangLogprobsPassThrough(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	mc := mocker.DefaultConfig()
	mc.BlockSize, mc.ContextLength, mc.Instant, mc.KVEvents.Enabled = 16, 4096, true, false
	mc.Vocabulary, mc.Logger = []engine.Token{30, 31, 32, 33, 34}, quiet
	ref, err := mocker.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close() })
	req := engine.Request{ID: "r", Prompt: []engine.Token{1, 2, 3}, MaxTokens: 5, IgnoreEOS: true, Logprobs: true, TopLogprobs: 2}
	wantToks, want := lpDrain(t, ref, req)
	for _, streamOutput := range []bool{false, true} {
		srv, err := standin.StartSGLang(standin.SGLangOptions{Model: "qwen", Mocker: mc, StreamOutput: streamOutput})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		e, err := upstream.New(t.Context(), upstream.Config{URL: srv.URL(), API: upstream.APISGLang, BlockSize: 16, HealthInterval: -1, MetricsInterval: -1, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		toks, lps := lpDrain(t, e, req)
		if !reflect.DeepEqual(toks, wantToks) || !reflect.DeepEqual(lps, want) {
			t.Fatalf("stream_output %v: got %v %+v\nwant %v %+v", streamOutput, toks, lps, wantToks, want)
		}
	}
}

// TestLlamaCppLogprobsPassThrough: the upstream engine asks llama-server's
// /completion for n_probs (at least 1: llama.cpp sends no probabilities
// for 0) and reads completion_probabilities back, one entry per token,
// keeping as many alternatives as the request asked for.
func TestLlamaCppLogprobsPassThrough(t *testing.T) {
	srv, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "qwen.gguf", Slots: 2, NCtx: 4096, SlotSimilarity: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	e, err := upstream.New(t.Context(), upstream.Config{URL: srv.URL(), API: upstream.APILlamaCpp, BlockSize: 16, HealthInterval: -1, MetricsInterval: -1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	for _, top := range []int{0, 3} {
		toks, lps := lpDrain(t, e, engine.Request{ID: "r", Prompt: []engine.Token{5, 6, 7}, MaxTokens: 4, Logprobs: true, TopLogprobs: top})
		if len(toks) != 4 || len(lps) != 4 {
			t.Fatalf("top %d: %d tokens, %d logprobs", top, len(toks), len(lps))
		}
		for i, lp := range lps {
			_, want := standin.LlamaCppLogprob(toks[i], 0)
			if lp.Token != toks[i] || lp.Logprob != float32(want) || len(lp.Top) != top {
				t.Fatalf("top %d, position %d: %+v", top, i, lp)
			}
			for k, alt := range lp.Top {
				id, v := standin.LlamaCppLogprob(toks[i], k)
				if alt.Token != id || alt.Logprob != float32(v) {
					t.Fatalf("top %d, position %d, alternative %d: %+v", top, i, k, alt)
				}
			}
		}
	}
}
