package upstream

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/engine/upstream/standin"
	"github.com/tandemllm/tandem/health"
)

// TestIdleConnectionClosedByServer: servers time kept-alive connections
// out (llama-server and vLLM after 5 s) and, now and then, close one as a
// request goes into it; the stand-ins make that happen to every request
// sent after an idle pause. With a client that keeps idle connections
// longer than the server, every such request used to fail as unavailable
// (a 503 and worker_unreachable against a healthy server); it is now
// retried on a fresh connection and succeeds.
func TestIdleConnectionClosedByServer(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	const idle = 100 * time.Millisecond
	type server interface {
		URL() string
		IdleClosed() int64
	}
	lc, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "qwen.gguf", NCtx: 4096, KeepAlive: idle})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	vl, err := standin.Start(standin.Options{Model: "m", ReturnTokenIDs: true, PromptTokensDetails: true, KeepAlive: idle,
		Mocker: mocker.Config{NumBlocks: 256, BlockSize: 16, ContextLength: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vl.Close() })
	for _, tc := range []struct {
		api string
		srv server
	}{{APILlamaCpp, lc}, {APIVLLM, vl}} {
		t.Run(tc.api, func(t *testing.T) {
			// A client that keeps idle connections for 90 s, as Tandem's did.
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second}}
			e, err := New(t.Context(), Config{URL: tc.srv.URL(), API: tc.api, BlockSize: 16, HealthInterval: -1,
				MetricsInterval: -1, Logger: quiet, Client: client})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			prompt := make([]engine.Token, 40)
			for i := range prompt {
				prompt[i] = engine.Token(100 + i)
			}
			for i := range 4 {
				time.Sleep(idle + idle/2)
				st, err := e.Generate(t.Context(), &engine.Request{Prompt: prompt, MaxTokens: 2})
				if err != nil {
					t.Fatalf("request %d after an idle pause: %v", i, err)
				}
				if toks, _ := drain(t, st); len(toks) != 2 {
					t.Fatalf("request %d: %d tokens", i, len(toks))
				}
			}
			if tc.srv.IdleClosed() == 0 {
				t.Fatal("the stand-in never closed an idle connection: the test did not exercise the race")
			}
		})
	}
	// The default client drops idle connections before the servers do.
	if tr, ok := NewClient().Transport.(*http.Transport); !ok || tr.IdleConnTimeout <= 0 || tr.IdleConnTimeout >= 5*time.Second {
		t.Fatalf("default idle connection timeout %v, want below the servers' 5 s", tr.IdleConnTimeout)
	}
}

// TestStartBeforeServer: Tandem may start before its servers (compose,
// pods). A server that is down, or loading (503 "Loading model"), used to
// make New fail; with the model named, the worker is now registered
// unavailable (upstream_unavailable on /health, requests refused as
// unavailable so they go elsewhere) and joins when the server answers.
func TestStartBeforeServer(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name string
		load time.Duration // the server starts at once and loads this long
		down time.Duration // the server starts this late
	}{{"loading", 400 * time.Millisecond, 0}, {"down", 0, 400 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := lis.Addr().String()
			lis.Close()
			start := func() {
				srv, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "qwen.gguf", NCtx: 4096, LoadTime: tc.load, Addr: addr})
				if err != nil {
					t.Error(err)
					return
				}
				t.Cleanup(func() { srv.Close() })
			}
			if tc.down == 0 {
				start()
			}
			cfg := Config{URL: "http://" + addr, API: APILlamaCpp, BlockSize: 16, HealthInterval: -1, MetricsInterval: -1,
				ConnectInterval: 50 * time.Millisecond, Logger: quiet}
			// Without a model named, the worker starts too; its model and
			// context are the server's once it answers (upstream_model_unknown
			// until then).
			anon, err := New(t.Context(), cfg)
			if err != nil {
				t.Fatalf("New before the server answers, no model named: %v", err)
			}
			t.Cleanup(func() { anon.Close() })
			ab := health.NewBoard(quiet, nil)
			anon.AttachBoard(ab, "w1")
			if !ab.IsActive(DiagModelUnknown, "w1") || anon.Info().Model != "" {
				t.Fatalf("%s active %v, model %q", DiagModelUnknown, ab.IsActive(DiagModelUnknown, "w1"), anon.Info().Model)
			}
			cfg.Model = "qwen.gguf"
			e, err := New(t.Context(), cfg)
			if err != nil {
				t.Fatalf("New before the server answers: %v", err)
			}
			t.Cleanup(func() { e.Close() })
			b := health.NewBoard(quiet, nil)
			e.AttachBoard(b, "w0")
			if !e.Pending() || !b.IsActive(DiagUnavailable, "w0") {
				t.Fatalf("pending %v, %s active %v", e.Pending(), DiagUnavailable, b.IsActive(DiagUnavailable, "w0"))
			}
			if _, err := e.Generate(t.Context(), &engine.Request{Prompt: []engine.Token{1, 2, 3}, MaxTokens: 1}); !errors.Is(err, engine.ErrUnavailable) {
				t.Fatalf("a request before the server answers: %v, want unavailable", err)
			}
			if tc.down > 0 {
				time.Sleep(tc.down)
				start()
			}
			deadline := time.Now().Add(10 * time.Second)
			for e.Pending() {
				if time.Now().After(deadline) {
					t.Fatal("the worker never joined")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if b.IsActive(DiagUnavailable, "w0") {
				t.Fatalf("%s still active after the server answered", DiagUnavailable)
			}
			select {
			case <-anon.InfoChanged():
			case <-time.After(10 * time.Second):
				t.Fatal("the worker without a model named never joined")
			}
			if info := anon.Info(); info.Model != "qwen.gguf" || info.ContextLength != 4096 || ab.IsActive(DiagModelUnknown, "w1") {
				t.Fatalf("after joining: %+v, %s active %v", info, DiagModelUnknown, ab.IsActive(DiagModelUnknown, "w1"))
			}
			st, err := e.Generate(context.Background(), &engine.Request{Prompt: []engine.Token{1, 2, 3}, MaxTokens: 2})
			if err != nil {
				t.Fatal(err)
			}
			if toks, _ := drain(t, st); len(toks) != 2 {
				t.Fatalf("%d tokens", len(toks))
			}
		})
	}
}
