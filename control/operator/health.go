package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/tandemllm/tandem/health"
)

// Diagnostic codes of the operator (its health board: log line,
// tandem_diagnostic_active, /health on the probe address).
const (
	// DiagReconcileFailed: an object's last reconcile failed (an apply the
	// API server refused, a status write); subject namespace/name. Cleared
	// by its next successful reconcile, or when the object is deleted.
	DiagReconcileFailed    = "operator_reconcile_failed"
	DiagReconcileRecovered = "operator_reconcile_recovered"
	// DiagAPIUnreachable: the API server did not answer the operator's
	// probe (GET /version); subject "kube-apiserver".
	DiagAPIUnreachable = "operator_api_unreachable"
	DiagAPIReachable   = "operator_api_reachable"
)

// apiSubject is the subject of DiagAPIUnreachable.
const apiSubject = "kube-apiserver"

// reportReconcile raises or clears DiagReconcileFailed for one object.
func (r *Reconciler) reportReconcile(key string, err error) {
	if r.Board == nil {
		return
	}
	if err == nil {
		r.Board.Clear(DiagReconcileFailed, key, DiagReconcileRecovered, "reconciled again")
		return
	}
	r.Board.Raise(DiagReconcileFailed, key, health.Error,
		fmt.Sprintf("reconcile of TandemDeployment %s failed (retried with backoff): %v", key, err), "object", key, "err", err)
}

// probeAPI checks the API server every period until ctx ends, raising
// DiagAPIUnreachable while it does not answer within timeout. The check is
// the server's /version, which every authenticated identity may read
// (the system:public-info-viewer ClusterRole): it tests reachability and
// credentials, not RBAC.
func probeAPI(ctx context.Context, check func(context.Context) error, b *health.Board, period, timeout time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err := check(cctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			b.Raise(DiagAPIUnreachable, apiSubject, health.Error,
				fmt.Sprintf("the Kubernetes API server does not answer: %v; nothing is reconciled until it does", err), "err", err)
		default:
			b.Clear(DiagAPIUnreachable, apiSubject, DiagAPIReachable, "the Kubernetes API server answers again")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// versionCheck is probeAPI's check against cfg's server.
func versionCheck(cfg *rest.Config) (func(context.Context) error, error) {
	c := rest.CopyConfig(cfg)
	c.Timeout = 0 // the probe's context bounds each call
	dc, err := discovery.NewDiscoveryClientForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("operator: API probe: %w", err)
	}
	return func(ctx context.Context) error {
		return dc.RESTClient().Get().AbsPath("/version").Do(ctx).Error()
	}, nil
}

// healthReport is /health's body, in the frontend's shape (status and
// diagnostics), so one reader serves both.
type healthReport struct {
	Status      string              `json:"status"`
	Diagnostics []health.Diagnostic `json:"diagnostics"`
}

// probeHandler serves /healthz and /readyz (liveness and readiness: the
// process answers) and /health (the board: status "degraded" while a
// diagnostic is active, still 200, as the frontend's /health).
func probeHandler(b *health.Board) http.Handler {
	mux := http.NewServeMux()
	checks := &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}
	// healthz.Handler serves its checks below the path it is mounted on,
	// as controller-runtime's own probe server mounts it.
	for _, p := range []string{"/healthz", "/readyz"} {
		h := http.StripPrefix(p, checks)
		mux.Handle(p, h)
		mux.Handle(p+"/", h)
	}
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		rep := healthReport{Status: "ok", Diagnostics: b.Active()}
		if len(rep.Diagnostics) > 0 {
			rep.Status = "degraded"
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	})
	return mux
}

// serveProbes serves probeHandler on addr until ctx ends. The probe port
// carries no secret and no prompt (docs/security.md); its bounds are the
// timeouts below.
func serveProbes(ctx context.Context, addr string, b *health.Board, log *slog.Logger) (net.Addr, <-chan error, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("operator: probe address: %w", err)
	}
	srv := &http.Server{Handler: probeHandler(b), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10}
	done := make(chan error, 1)
	go func() {
		err := srv.Serve(l)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		done <- err
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("operator: probe server shutdown", "err", err)
		}
	}()
	return l.Addr(), done, nil
}
