package process

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/health"
)

// DiagDrainTimeout (log, and the worker's board): in-flight requests
// outlived the drain timeout and were cut.
const DiagDrainTimeout = "drain_timeout"

var _ = health.Register(DiagDrainTimeout)

// Base is a process's logger, metrics registry and diagnostics board.
type Base struct {
	Log      *slog.Logger
	Registry *prometheus.Registry
	Board    *health.Board
}

// New fills what the caller did not supply: the default logger, a
// registry from NewRegistry, a board that publishes on that registry. A
// caller that passes its own board keeps it (a test reads one board across
// processes; the worker command's board is on no registry).
func New(log *slog.Logger, reg *prometheus.Registry, board *health.Board) Base {
	if log == nil {
		log = slog.Default()
	}
	if reg == nil {
		reg = NewRegistry()
	}
	if board == nil {
		board = health.NewBoard(log, reg)
	}
	return Base{Log: log, Registry: reg, Board: board}
}

// NewRegistry is the registry a process's /metrics serves: the Go runtime
// and process collectors first, the process's own metrics added by its
// parts.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// ShutdownHTTP drains srv: it stops accepting and waits for in-flight
// requests until ctx ends; then it closes the connections left, logging
// DiagDrainTimeout. It returns Shutdown's error (context.DeadlineExceeded
// after a cut).
func ShutdownHTTP(ctx context.Context, srv *http.Server, log *slog.Logger) error {
	err := srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		log.Warn("drain timeout: closing remaining connections", "diagnostic_code", DiagDrainTimeout)
		_ = srv.Close()
	}
	return err
}

// Drain runs shutdown with a context that ends after timeout: the end of
// every long-running command (SIGTERM or Ctrl-C, or its server stopped).
// A drain that ran out of time is not an error of the command: the cut
// was logged (DiagDrainTimeout) and the process still exits cleanly.
func Drain(log *slog.Logger, timeout time.Duration, shutdown func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	log.Info("stopped")
	return nil
}

// WarnExposed raises authn.DiagOpenPlane (warn) for one of the process's
// listeners, plane, when addr is bound beyond this host (authn.Exposed);
// an empty addr is no listener.
func WarnExposed(board *health.Board, plane, addr, msg string) {
	if addr != "" && authn.Exposed(addr) {
		board.Raise(authn.DiagOpenPlane, plane, health.Warn, msg, "addr", addr)
	}
}
