package eventplane

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/health"
)

// TestCloseRaisesNothing: a process closing its own NATS connection (its
// shutdown) has lost nothing: no event_plane_disconnected diagnostic and no
// ERROR line.
func TestCloseRaisesNothing(t *testing.T) {
	srv, err := StartServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	board := health.NewBoard(log, nil)
	ctx, cancel := context.WithCancel(context.Background())
	nc, err := Connect(ctx, srv.URL(), "frontend", board, log)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "connected", nc.IsConnected)
	cancel() // the process's shutdown: Connect closes the connection
	waitUntil(t, 10*time.Second, "closed", nc.IsClosed)
	nc.Close()
	time.Sleep(50 * time.Millisecond) // nats.go runs callbacks on its own goroutine
	if board.IsActive(DiagDisconnected, "nats") || strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("a clean close raised a disconnection:\n%s", logs.String())
	}
}
