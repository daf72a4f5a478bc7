// Package process is what every Tandem process is assembled on, in one
// place: the logger, the Prometheus registry with the Go and process
// collectors, the diagnostics board on that registry, and the drain
// (stop taking work, let in-flight requests finish within a timeout, cut
// the rest and say so with drain_timeout). `serve`, `frontend` (the
// `tandem frontend` process) and `worker` build on it, and cmd/tandem's
// three long-running commands drain through Drain.
package process
