package upstream

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
)

// TestConnectionReused: a finished stream's connection goes back to the
// client's pool, so the engine's next request does not dial a new one.
// The server pauses after its finish event and after "[DONE]" (as a busy
// server may): a stream closed at the finish event, before the rest of the
// response is read, makes net/http drop the connection instead. The rest
// is read after the last Delta is returned, so the next request comes a
// client's round trip later (gap).
func TestConnectionReused(t *testing.T) {
	const (
		tok   = `{"choices":[{"index":0,"text":"a","token_ids":[7],"finish_reason":null}]%s}`
		fin   = `{"choices":[{"index":0,"text":"b","token_ids":[8],"finish_reason":"stop"}]%s}`
		usage = `,"usage":{"prompt_tokens":2,"completion_tokens":2,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":1}}`
		pause = 2 * time.Millisecond
		gap   = 20 * time.Millisecond
		runs  = 10
	)
	tests := []struct {
		name   string
		chunks []string
	}{
		{"continuous usage stats", []string{fmt.Sprintf(tok, usage), fmt.Sprintf(fin, usage)}},
		{"usage after the finish", []string{fmt.Sprintf(tok, ""), fmt.Sprintf(fin, ""), `{"choices":[]` + usage + `}`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
				fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model","max_model_len":4096}]}`)
			})
			mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for _, c := range tc.chunks {
					fmt.Fprintf(w, "data: %s\n\n", c)
					w.(http.Flusher).Flush()
				}
				time.Sleep(pause)
				fmt.Fprint(w, "data: [DONE]\n\n")
				w.(http.Flusher).Flush()
				time.Sleep(pause)
			})
			srv := httptest.NewUnstartedServer(mux)
			var dials atomic.Int64
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					dials.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			e, err := newTest(t, Config{URL: srv.URL, HealthInterval: -1, MetricsInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			before := dials.Load()
			for i := range runs {
				if i > 0 {
					time.Sleep(gap)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				st, err := e.Generate(ctx, &engine.Request{ID: "r", Prompt: []engine.Token{1, 2}, MaxTokens: 2})
				if err != nil {
					cancel()
					t.Fatal(err)
				}
				toks, last, err := collect(t, st)
				// The caller cancels its context once the stream is done
				// (dispatch does): a connection back in the pool stays.
				cancel()
				if err != nil || !slices.Equal(toks, []engine.Token{7, 8}) || last.Finish != engine.FinishStop || last.PromptTokens != 2 || last.CachedTokens != 1 {
					t.Fatalf("stream: %v %v %+v", toks, err, last)
				}
			}
			// One new connection at most (the probe's may have gone idle);
			// a few more only if this machine stalled a stream's end past
			// the gap. Without reading the end, every stream dials.
			if n := dials.Load() - before; n > runs/3 {
				t.Fatalf("%d new connections for %d streams, want them reused", n, runs)
			}
		})
	}
}
