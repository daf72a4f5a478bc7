package planner

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// KeyChecker validates a bearer key (httpapi.APIKeys, loaded from
// --api-key-file as for the frontend).
type KeyChecker interface {
	Valid(key string) bool
}

// Handler is the planner's own listener: /health (its decisions, reasons
// and diagnostics) and /metrics (tandem_planner_*). With keys every path
// needs "Authorization: Bearer <key>"; without, the listener must be on
// loopback (CheckListen), so only this host's users reach it.
func (l *Loop) Handler(g prometheus.Gatherer, keys KeyChecker) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", l.ServeHealth)
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	if keys == nil {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !found || key == "" || !keys.Valid(key) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tandem-planner"`)
			http.Error(w, "the planner's endpoints need Authorization: Bearer <key> (--planner-api-key-file)", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// CheckListen refuses a listen address reachable from other hosts unless
// its endpoints need a key: the planner's /health shows the deployment's
// traffic and decisions.
func CheckListen(addr string, keyed bool) error {
	if keyed {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("planner: listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return errors.New("planner: listen address " + addr + " is not a loopback address: give --planner-api-key-file so that its /health and /metrics need a key")
}
