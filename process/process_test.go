package process

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/health"
)

func TestNew(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	own := health.NewBoard(log, nil)
	tests := []struct {
		name      string
		board     *health.Board
		wantOwn   bool
		wantGauge bool
	}{
		{"defaults: the board publishes on the registry", nil, false, true},
		{"a board passed in is kept", own, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(log, nil, tt.board)
			if b.Log != log || b.Registry == nil || b.Board == nil || (b.Board == own) != tt.wantOwn {
				t.Fatalf("%+v", b)
			}
			b.Board.Raise("test_code", "s", health.Warn, "x")
			mfs, err := b.Registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, mf := range mfs {
				names = append(names, mf.GetName())
			}
			all := strings.Join(names, " ")
			if !strings.Contains(all, "go_goroutines") {
				t.Fatalf("no Go collector: %s", all)
			}
			if got := strings.Contains(all, "tandem_diagnostic_active"); got != tt.wantGauge {
				t.Fatalf("diagnostic gauge on the registry: %v, want %v", got, tt.wantGauge)
			}
		})
	}
}

// TestDrainCutsLateRequests: a request that outlives the drain timeout is
// cut, and the drain is not the command's error.
func TestDrainCutsLateRequests(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inside := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(inside)
		<-r.Context().Done() // held until the connection is cut
	})}
	go srv.Serve(lis)
	done := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + lis.Addr().String())
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case <-inside:
	case <-time.After(30 * time.Second):
		t.Fatal("request never arrived")
	}
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	if err := Drain(log, 50*time.Millisecond, func(ctx context.Context) error { return ShutdownHTTP(ctx, srv, log) }); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if !strings.Contains(logged.String(), "diagnostic_code="+DiagDrainTimeout) {
		t.Fatalf("no drain_timeout logged: %s", logged.String())
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the held request completed instead of being cut")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the held request was never cut")
	}
	boom := errors.New("boom")
	if err := Drain(log, time.Second, func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Drain hid a real error: %v", err)
	}
}
