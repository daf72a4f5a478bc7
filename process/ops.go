package process

import (
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tandemllm/tandem/health"
)

// Ops is a process's operations listener: /metrics and /health.
type Ops struct {
	// Gatherer is what /metrics serves.
	Gatherer prometheus.Gatherer
	// Board's active diagnostics are /health's: "ok" without any,
	// "degraded" with some.
	Board *health.Board
	// Fields are added to /health's JSON body (e.g. the worker's id).
	Fields map[string]any
	// TLS, if set, serves HTTPS.
	TLS *tls.Config
	// ConnState is the server's (e.g. connlimit.EstablishOnRequest).
	ConnState func(net.Conn, http.ConnState)
	Logger    *slog.Logger
}

// Serve serves o on lis in the background; Close the server to stop it.
func (o Ops) Serve(lis net.Listener) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /health", func(rw http.ResponseWriter, _ *http.Request) {
		ds := o.Board.Active()
		body := map[string]any{"status": "ok", "diagnostics": ds}
		if len(ds) > 0 {
			body["status"] = "degraded"
		}
		for k, v := range o.Fields {
			body[k] = v
		}
		b, _ := json.Marshal(body)
		rw.Header().Set("Content-Type", "application/json")
		_, _ = rw.Write(b)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ConnState: o.ConnState,
		ErrorLog: slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn), TLSConfig: o.TLS}
	if o.TLS != nil {
		go func() { _ = srv.ServeTLS(lis, "", "") }()
	} else {
		go func() { _ = srv.Serve(lis) }()
	}
	return srv
}
