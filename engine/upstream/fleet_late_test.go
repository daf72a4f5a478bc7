package upstream

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/engine/upstream/standin"
	"github.com/tandemllm/tandem/health"
)

// TestFleetSGLangStartsBeforeServer: an SGLang server need not answer
// when Tandem starts. Its ranks come from --upstream-dp-size (one worker
// each, checked when the server answers), or, undeclared, it is one
// worker whose requests go unpinned to SGLang's own DP balancer, said on
// /health (upstream_dp_ranks_unplanned). A declared size the server does
// not have keeps the workers out, said on /health.
func TestFleetSGLangStartsBeforeServer(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name       string
		dpSize     int // --upstream-dp-size
		workers    int // the workers the fleet makes before the server answers
		join       bool
		unplanned  bool
		serverDP   int
		wantActive string
	}{
		{name: "declared", dpSize: 2, workers: 2, join: true, serverDP: 2},
		{name: "undeclared", dpSize: 0, workers: 1, join: true, unplanned: true, serverDP: 2},
		{name: "wrong-size", dpSize: 3, workers: 3, join: false, serverDP: 2, wantActive: DiagUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := lis.Addr().String()
			lis.Close()
			u := Fleet{URLs: []string{"http://" + addr}, API: APISGLang, DPSize: tc.dpSize}
			if err := u.Check(); err != nil {
				t.Fatal(err)
			}
			if err := u.ResolveTargets(t.Context(), quiet); err != nil {
				t.Fatalf("a server that does not answer yet: %v", err)
			}
			if u.Workers() != tc.workers {
				t.Fatalf("%d workers, want %d", u.Workers(), tc.workers)
			}
			b := health.NewBoard(quiet, nil)
			var engs []*Engine
			for i := range u.Workers() {
				cfg, err := u.Config(i)
				if err != nil {
					t.Fatal(err)
				}
				cfg.HealthInterval, cfg.MetricsInterval, cfg.ConnectInterval, cfg.Logger = -1, -1, 20*time.Millisecond, quiet
				e, err := New(t.Context(), cfg)
				if err != nil {
					t.Fatalf("worker %d before the server answers: %v", i, err)
				}
				t.Cleanup(func() { e.Close() })
				e.AttachBoard(b, "w"+string(rune('0'+i)))
				if !e.Pending() {
					t.Fatalf("worker %d is not pending", i)
				}
				engs = append(engs, e)
			}
			mc := mocker.DefaultConfig()
			mc.Instant, mc.KVEvents.Enabled = true, false
			srv, err := standin.StartSGLang(standin.SGLangOptions{Model: "m", Mocker: mc, DPSize: tc.serverDP, Addr: addr})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close() })
			for i, e := range engs {
				w := "w" + string(rune('0'+i))
				if !tc.join {
					deadline := time.Now().Add(5 * time.Second)
					for !(b.IsActive(tc.wantActive, w) && strings.Contains(downErr(e), "--upstream-dp-size says")) {
						if time.Now().After(deadline) {
							t.Fatalf("worker %d: no %s for a server with another rank count", i, tc.wantActive)
						}
						time.Sleep(10 * time.Millisecond)
					}
					if !e.Pending() {
						t.Fatalf("worker %d joined a server with %d ranks as one of %d", i, tc.serverDP, tc.dpSize)
					}
					continue
				}
				select {
				case <-e.InfoChanged():
				case <-time.After(10 * time.Second):
					t.Fatalf("worker %d never joined", i)
				}
				if b.IsActive(DiagUnavailable, w) || b.IsActive(DiagModelUnknown, w) || b.IsActive(DiagDPRanksUnplanned, w) != tc.unplanned {
					t.Fatalf("worker %d: unavailable %v, model unknown %v, unplanned %v", i, b.IsActive(DiagUnavailable, w),
						b.IsActive(DiagModelUnknown, w), b.IsActive(DiagDPRanksUnplanned, w))
				}
				if e.unpinned.Load() != tc.unplanned {
					t.Fatalf("worker %d: unpinned %v", i, e.unpinned.Load())
				}
				if e.Info().Model != "m" {
					t.Fatalf("worker %d: model %q", i, e.Info().Model)
				}
				for range 2 {
					st, err := e.Generate(t.Context(), &engine.Request{Prompt: []engine.Token{1, 2, 3}, MaxTokens: 2})
					if err != nil {
						t.Fatalf("worker %d: %v", i, err)
					}
					if toks, _ := drain(t, st); len(toks) != 2 {
						t.Fatalf("worker %d: %d tokens", i, len(toks))
					}
				}
			}
		})
	}
}

// downErr is why e is down ("" up).
func downErr(e *Engine) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.down == nil {
		return ""
	}
	return e.down.Error()
}
