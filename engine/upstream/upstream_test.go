package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
)

// fakeVLLM answers /v1/models and /v1/completions the way vLLM does; the
// real counterpart (Tandem's own vLLM-compatible server) is exercised in
// serve's tests.
type fakeVLLM struct {
	mu     sync.Mutex
	bodies []map[string]any
	down   atomic.Bool // GET /health answers 503
	// complete writes the /v1/completions response.
	complete func(w http.ResponseWriter, r *http.Request, body map[string]any)
}

func (f *fakeVLLM) start(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"Qwen/Qwen3-0.6B","object":"model","max_model_len":4096}]}`)
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		if f.down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var b map[string]any
		_ = json.NewDecoder(r.Body).Decode(&b)
		f.mu.Lock()
		f.bodies = append(f.bodies, b)
		f.mu.Unlock()
		f.complete(w, r, b)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// newTest is New with the engine closed at the end of the test (its
// health watcher stops).
func newTest(t *testing.T, cfg Config) (*Engine, error) {
	t.Helper()
	e, err := New(context.Background(), cfg)
	if err == nil {
		t.Cleanup(func() { _ = e.Close() })
	}
	return e, err
}

func sse(w http.ResponseWriter, chunks ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, c := range chunks {
		fmt.Fprintf(w, "data: %s\n\n", c)
		w.(http.Flusher).Flush()
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func collect(t *testing.T, st engine.Stream) ([]engine.Token, engine.Delta, error) {
	t.Helper()
	var toks []engine.Token
	var last engine.Delta
	for {
		d, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return toks, last, nil
		}
		if err != nil {
			return toks, last, err
		}
		toks = append(toks, d.Tokens...)
		if d.PromptTokens > 0 {
			last.PromptTokens, last.CachedTokens = d.PromptTokens, d.CachedTokens
		}
		if d.Finish != "" {
			last.Finish = d.Finish
		}
		if d.KVTransferParams != nil {
			last.KVTransferParams = d.KVTransferParams
		}
	}
}

func TestNewLearnsTheModel(t *testing.T) {
	f := &fakeVLLM{}
	e, err := newTest(t, Config{URL: f.start(t) + "/"})
	if err != nil {
		t.Fatal(err)
	}
	if i := e.Info(); i.Model != "Qwen/Qwen3-0.6B" || i.ContextLength != 4096 || i.BlockSize != 16 || i.Kind != "upstream" {
		t.Fatalf("info %+v", i)
	}
	if _, err := New(context.Background(), Config{URL: f.start(t), Model: "llama"}); err == nil || !strings.Contains(err.Error(), "Qwen/Qwen3-0.6B") {
		t.Fatalf("unknown model: %v", err)
	}
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := lis.Addr().String()
	lis.Close()
	// An unreachable server is a pending worker, even with no model named
	// (issue 34: start in any order); its requests are unavailable.
	late, err := New(context.Background(), Config{URL: "http://" + addr, HealthInterval: -1, MetricsInterval: -1})
	if err != nil || !late.Pending() {
		t.Fatalf("unreachable: %v", err)
	}
	defer late.Close()
	if _, err := late.Generate(context.Background(), &engine.Request{Prompt: []engine.Token{1}}); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("a request to an unreachable server: %v", err)
	}
}

func TestGenerate(t *testing.T) {
	const (
		first = `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"Hi","token_ids":[9,10],"prompt_token_ids":[1,2,3],"finish_reason":null}]`
		mid   = `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" there","token_ids":[11],"finish_reason":null}]`
		last  = `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"!","token_ids":[12],"finish_reason":"length"}]`
		usage = `"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":2}}`
	)
	tests := []struct {
		name       string
		chunks     []string
		wantTokens []engine.Token
		wantErr    error
		wantCached int
	}{
		{"continuous usage stats", []string{first + "," + usage + "}", mid + "," + usage + "}", last + "," + usage + "}"},
			[]engine.Token{9, 10, 11, 12}, nil, 2},
		{"usage only after the finish", []string{first + "}", mid + "}", last + "}", `{"choices":[],` + usage + "}"},
			[]engine.Token{9, 10, 11, 12}, nil, 2},
		{"no usage at all", []string{first + "}", last + "}"}, []engine.Token{9, 10, 12}, nil, 0},
		{"text without token_ids and no codec", []string{`{"choices":[{"index":0,"text":"Hi","finish_reason":null}]}`}, nil, ErrNoTokenIDs, 0},
		{"error event", []string{first + "}", `{"error":{"message":"engine died","code":500}}`}, []engine.Token{9, 10}, errors.New("engine died"), 0},
		{"no finish before [DONE]", []string{first + "}"}, []engine.Token{9, 10}, io.ErrUnexpectedEOF, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeVLLM{complete: func(w http.ResponseWriter, _ *http.Request, _ map[string]any) { sse(w, tc.chunks...) }}
			e, err := newTest(t, Config{URL: f.start(t)})
			if err != nil {
				t.Fatal(err)
			}
			st, err := e.Generate(context.Background(), &engine.Request{ID: "r1", Prompt: []engine.Token{1, 2, 3}, MaxTokens: 4})
			if err != nil {
				t.Fatal(err)
			}
			toks, d, err := collect(t, st)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("err %v", err)
			case tc.wantErr != nil && (err == nil || !(errors.Is(err, tc.wantErr) || strings.Contains(err.Error(), tc.wantErr.Error()))):
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if !slices.Equal(toks, tc.wantTokens) {
				t.Fatalf("tokens %v, want %v", toks, tc.wantTokens)
			}
			if tc.wantErr == nil && (d.Finish != engine.FinishLength || d.PromptTokens != 3 || d.CachedTokens != tc.wantCached) {
				t.Fatalf("last %+v", d)
			}
		})
	}
}

// TestRequestBody: what goes to the server is a token-id completions
// request with vLLM's extensions.
func TestRequestBody(t *testing.T) {
	f := &fakeVLLM{complete: func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		sse(w, `{"choices":[{"index":0,"text":"x","token_ids":[5],"finish_reason":"stop"}]}`)
	}}
	e, err := newTest(t, Config{URL: f.start(t)})
	if err != nil {
		t.Fatal(err)
	}
	req := &engine.Request{ID: "r", Prompt: []engine.Token{1, 2}, MinTokens: 1, IgnoreEOS: true, StopTokens: []engine.Token{7},
		Sampling: engine.Sampling{Temperature: 0.5, TopP: 0.9, TopK: 4, Seed: 1<<63 + 5, HasSeed: true}}
	st, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := collect(t, st); err != nil {
		t.Fatal(err)
	}
	got := f.bodies[0]
	want := map[string]any{"model": "Qwen/Qwen3-0.6B", "prompt": []any{1.0, 2.0}, "max_tokens": 4094.0, "min_tokens": 1.0,
		"ignore_eos": true, "stop_token_ids": []any{7.0}, "temperature": 0.5, "top_p": 0.9, "top_k": 4.0, "seed": 5.0,
		"stream": true, "stream_options": map[string]any{"include_usage": true, "continuous_usage_stats": true}, "return_token_ids": true}
	for k, v := range want {
		if fmt.Sprint(got[k]) != fmt.Sprint(v) {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// TestPrefillLeg: kv_transfer_params asking for a remote decode make the
// request unstreamed (vLLM returns the decode leg's parameters only in a
// whole response), and those parameters come back on the Delta.
func TestPrefillLeg(t *testing.T) {
	f := &fakeVLLM{complete: func(w http.ResponseWriter, _ *http.Request, b map[string]any) {
		if b["stream"] != false {
			t.Errorf("prefill leg streamed: %v", b["stream"])
		}
		fmt.Fprint(w, `{"id":"cmpl-2","choices":[{"index":0,"text":"a","token_ids":[4],"finish_reason":"length"}],`+
			`"usage":{"prompt_tokens":40,"completion_tokens":1,"prompt_tokens_details":null},`+
			`"kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[1,2],"remote_engine_id":"p","remote_host":"h","remote_port":5600}}`)
	}}
	e, err := newTest(t, Config{URL: f.start(t)})
	if err != nil {
		t.Fatal(err)
	}
	params := json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)
	st, err := e.Generate(context.Background(), &engine.Request{Prompt: make([]engine.Token, 40), MaxTokens: 1, KVTransferParams: params})
	if err != nil {
		t.Fatal(err)
	}
	toks, d, err := collect(t, st)
	if err != nil || !slices.Equal(toks, []engine.Token{4}) || d.PromptTokens != 40 || !strings.Contains(string(d.KVTransferParams), `"remote_block_ids":[1,2]`) {
		t.Fatalf("tokens %v, delta %+v, err %v", toks, d, err)
	}
	if fmt.Sprint(f.bodies[0]["kv_transfer_params"]) != fmt.Sprint(map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
		"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}) {
		t.Fatalf("kv_transfer_params sent: %v", f.bodies[0]["kv_transfer_params"])
	}
}

func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   error
	}{
		{"context length (message)", 400, `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens","type":"BadRequestError","code":400}`, engine.ErrPromptTooLong},
		{"context length (code)", 400, `{"error":{"message":"too long","type":"BadRequestError","code":"context_length_exceeded"}}`, engine.ErrPromptTooLong},
		{"overloaded", 503, `{"error":{"message":"busy"}}`, engine.ErrOverloaded},
		{"rate limited", 429, `{"error":{"message":"slow down"}}`, engine.ErrOverloaded},
		// One request's 500 is that request's failure, not a server that
		// is gone (it used to be labelled "worker unavailable").
		{"server error", 500, `internal`, errServerError},
		{"bad gateway", 502, `down`, engine.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeVLLM{complete: func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			}}
			e, err := newTest(t, Config{URL: f.start(t)})
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.Generate(context.Background(), &engine.Request{Prompt: []engine.Token{1}, MaxTokens: 1})
			if !errors.Is(err, tc.want) || (tc.want == errServerError && errors.Is(err, engine.ErrUnavailable)) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

// TestCancel: cancelling the request's context ends the stream and the
// upstream request (vLLM aborts a request whose client went away).
func TestCancel(t *testing.T) {
	gone := make(chan struct{})
	f := &fakeVLLM{complete: func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"token_ids\":[1],\"finish_reason\":null}]}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(gone)
	}}
	e, err := newTest(t, Config{URL: f.start(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := e.Generate(ctx, &engine.Request{Prompt: []engine.Token{1}, MaxTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := st.Recv(); err != nil || !slices.Equal(d.Tokens, []engine.Token{1}) {
		t.Fatalf("first delta %+v, %v", d, err)
	}
	cancel()
	if _, err := st.Recv(); err == nil {
		t.Fatal("stream went on after cancel")
	}
	select {
	case <-gone:
	case <-time.After(2 * time.Second):
		t.Fatal("the upstream request was not aborted")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Generate(context.Background(), &engine.Request{Prompt: []engine.Token{1}}); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// FuzzStream: whatever bytes an upstream sends, the stream ends (EOF or
// an error) without panicking, and never yields more deltas than lines.
func FuzzStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"token_ids\":[1],\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":1}}}\n\n"))
	f.Add([]byte("data: {\"error\":{\"message\":\"x\"}}\n\ndata: [DONE]\n\n"))
	f.Add([]byte(": comment\nevent: x\ndata: [DONE]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st := &sseStream{body: io.NopCloser(nil), r: bufio.NewReaderSize(bytes.NewReader(b), 64<<10), promptLen: 3}
		lines := bytes.Count(b, []byte("\n")) + 1
		for i := 0; ; i++ {
			if i > lines {
				t.Fatalf("%d deltas from %d lines", i, lines)
			}
			if _, err := st.Recv(); err != nil {
				return
			}
		}
	})
}

// TestLongLines: the first chunk carries the prompt's ids, so a long
// prompt makes a line far longer than the reader's buffer.
func TestLongLines(t *testing.T) {
	prompt := make([]engine.Token, 50000)
	for i := range prompt {
		prompt[i] = engine.Token(100000 + i)
	}
	ids, _ := json.Marshal(prompt)
	f := &fakeVLLM{complete: func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		sse(w, `{"choices":[{"index":0,"text":"a","prompt_token_ids":`+string(ids)+`,"token_ids":[1],"finish_reason":null}]}`,
			`{"choices":[{"index":0,"text":"b","token_ids":[2],"finish_reason":"stop"}]}`)
	}}
	e, err := newTest(t, Config{URL: f.start(t), ContextLength: 100000})
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.Generate(context.Background(), &engine.Request{Prompt: prompt, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	if toks, d, err := collect(t, st); err != nil || !slices.Equal(toks, []engine.Token{1, 2}) || d.PromptTokens != 50000 {
		t.Fatalf("tokens %v, delta %+v, err %v", toks, d, err)
	}
}

func waitActive(t *testing.T, b *health.Board, want bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for b.IsActive(DiagUnavailable, "w0") != want {
		if time.Now().After(deadline) {
			t.Fatalf("upstream_unavailable active = %v, want %v", !want, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHealthWatch: a server that stops answering is a diagnostic on the
// worker's board (and so its /health and metrics), cleared when it
// answers again; a failed request checks at once, without waiting for the
// next poll.
func TestHealthWatch(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	t.Run("poll", func(t *testing.T) {
		f := &fakeVLLM{}
		e, err := newTest(t, Config{URL: f.start(t), HealthInterval: 10 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		b := health.NewBoard(quiet, nil)
		e.AttachBoard(b, "w0")
		f.down.Store(true)
		waitActive(t, b, true)
		f.down.Store(false)
		waitActive(t, b, false)
	})
	t.Run("failed request", func(t *testing.T) {
		f := &fakeVLLM{complete: func(w http.ResponseWriter, _ *http.Request, _ map[string]any) { w.WriteHeader(http.StatusBadGateway) }}
		e, err := newTest(t, Config{URL: f.start(t), HealthInterval: -1, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		b := health.NewBoard(quiet, nil)
		e.AttachBoard(b, "w0")
		f.down.Store(true)
		if _, err := e.Generate(context.Background(), &engine.Request{Prompt: []engine.Token{1}, MaxTokens: 1}); !errors.Is(err, engine.ErrUnavailable) {
			t.Fatalf("err %v", err)
		}
		waitActive(t, b, true)
	})
}

// wordCodec is a Codec whose ids are the bytes of the text, so the
// round trip is exact and the counts are easy to check.
type wordCodec struct{}

func (wordCodec) Encode(s string) []engine.Token {
	out := make([]engine.Token, len(s))
	for i := range len(s) {
		out[i] = engine.Token(s[i])
	}
	return out
}

func (wordCodec) Decode(ids []engine.Token) string {
	b := make([]byte, len(ids))
	for i, t := range ids {
		b[i] = byte(t)
	}
	return string(b)
}

// TestTextOnly: a server that sends text without token_ids (vLLM before
// 0.10.2, SGLang's and llama.cpp's OpenAI APIs) is served through the
// Codec, and cached_tokens that come only with the final usage chunk
// reach the last Delta while the first carries no usage (PromptTokens 0).
func TestTextOnly(t *testing.T) {
	var codec wordCodec
	chunks := []string{
		`{"choices":[{"index":0,"text":"Hi","finish_reason":null}]}`,
		`{"choices":[{"index":0,"text":" you","finish_reason":"stop"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":2}}}`,
	}
	for _, api := range []string{APIVLLM, APIOpenAI} {
		t.Run(api, func(t *testing.T) {
			f := &fakeVLLM{complete: func(w http.ResponseWriter, _ *http.Request, _ map[string]any) { sse(w, chunks...) }}
			e, err := newTest(t, Config{URL: f.start(t), API: api, Codec: wordCodec{}})
			if err != nil {
				t.Fatal(err)
			}
			st, err := e.Generate(context.Background(), &engine.Request{ID: "r", Prompt: codec.Encode("abc"), MaxTokens: 8, IgnoreEOS: true, StopTokens: []engine.Token{1}})
			if err != nil {
				t.Fatal(err)
			}
			d0, err := st.Recv()
			if err != nil || d0.PromptTokens != 0 || codec.Decode(d0.Tokens) != "Hi" {
				t.Fatalf("first %+v %v", d0, err)
			}
			toks, last, err := collect(t, st)
			if err != nil || codec.Decode(toks) != " you" || last.PromptTokens != 3 || last.CachedTokens != 2 || last.Finish != engine.FinishStop {
				t.Fatalf("rest %q %+v %v", codec.Decode(toks), last, err)
			}
			body := f.bodies[0]
			if api == APIOpenAI {
				if body["prompt"] != "abc" {
					t.Errorf("openai prompt %v, want the text", body["prompt"])
				}
				for _, k := range []string{"return_token_ids", "ignore_eos", "stop_token_ids", "min_tokens", "top_k"} {
					if _, ok := body[k]; ok {
						t.Errorf("openai request carries vLLM's %s", k)
					}
				}
				if so := fmt.Sprint(body["stream_options"]); so != "map[include_usage:true]" {
					t.Errorf("stream_options %s", so)
				}
			}
		})
	}
	if _, err := New(context.Background(), Config{URL: "http://127.0.0.1:1", API: APIOpenAI}); err == nil {
		t.Error("openai without a codec accepted")
	}
}

// TestNoCachedTokensDiagnostic: usage without prompt_tokens_details (vLLM
// without --enable-prompt-tokens-details) raises a diagnostic.
func TestNoCachedTokensDiagnostic(t *testing.T) {
	f := &fakeVLLM{complete: func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		sse(w, `{"choices":[{"index":0,"text":"x","token_ids":[5],"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1}}`)
	}}
	e, err := newTest(t, Config{URL: f.start(t)})
	if err != nil {
		t.Fatal(err)
	}
	b := health.NewBoard(slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	e.AttachBoard(b, "w0")
	st, err := e.Generate(context.Background(), &engine.Request{ID: "r", Prompt: []engine.Token{1, 2}, MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := collect(t, st); err != nil {
		t.Fatal(err)
	}
	if !b.IsActive(DiagNoCachedTokens, "w0") {
		t.Fatalf("no %s: %+v", DiagNoCachedTokens, b.Active())
	}
}
