package operator

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/tandemllm/tandem/health"
)

// TestAPIProbe: an API server that stops answering raises
// operator_api_unreachable (on /health too), and clears it when it
// answers again.
func TestAPIProbe(t *testing.T) {
	var down atomic.Bool
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37","gitVersion":"v1.37.2"}`))
	}))
	defer api.Close()
	check, err := versionCheck(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	b := health.NewBoard(slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go probeAPI(ctx, check, b, 10*time.Millisecond, time.Second)
	hs := httptest.NewServer(probeHandler(b))
	defer hs.Close()
	status := func() healthReport {
		resp, err := http.Get(hs.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h healthReport
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/health: %d %v", resp.StatusCode, err)
		}
		return h
	}
	wait := func(active bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for b.IsActive(DiagAPIUnreachable, apiSubject) != active {
			if time.Now().After(deadline) {
				t.Fatalf("operator_api_unreachable active=%v not reached", active)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait(false)
	if h := status(); h.Status != "ok" || len(h.Diagnostics) != 0 {
		t.Fatalf("healthy: %+v", h)
	}
	down.Store(true)
	wait(true)
	if h := status(); h.Status != "degraded" || len(h.Diagnostics) != 1 || h.Diagnostics[0].Code != DiagAPIUnreachable {
		t.Fatalf("down: %+v", h)
	}
	down.Store(false)
	wait(false)
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(hs.URL + p)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %v %v", p, resp, err)
		}
		resp.Body.Close()
	}
	if err := check(ctx); err != nil {
		t.Fatal(err)
	}
}
