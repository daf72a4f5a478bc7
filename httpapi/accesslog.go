package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"
)

// The access log: one info line per generation request, written when it
// ends whatever the outcome, with what an operator looks for first (who
// served it, how it ended, how much it cost, how long the first token
// took). Config.NoAccessLog (--access-log=false) turns it off.

type accessKey struct{}

// accessEntry is filled as the request runs; one goroutine owns it.
type accessEntry struct {
	id, model, worker string
	in, out, cached   int
	ttft              time.Duration
	finish            string
}

// accessLogged wraps a generation handler with the access log.
func (s *Server) accessLogged(endpoint string, h http.HandlerFunc) http.HandlerFunc {
	if s.cfg.NoAccessLog {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		e := &accessEntry{}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h(sw, r.WithContext(context.WithValue(r.Context(), accessKey{}, e)))
		id := e.id
		if id == "" {
			id = sw.Header().Get("X-Request-Id")
		}
		attrs := []slog.Attr{slog.String("request_id", id), slog.String("endpoint", endpoint), slog.String("model", e.model),
			slog.String("worker", e.worker), slog.Int("status", sw.status), slog.Int("prompt_tokens", e.in),
			slog.Int("completion_tokens", e.out), slog.Int("cached_tokens", e.cached)}
		if e.ttft > 0 {
			attrs = append(attrs, slog.Duration("ttft", e.ttft))
		}
		if e.finish != "" {
			attrs = append(attrs, slog.String("finish", e.finish))
		}
		attrs = append(attrs, slog.Duration("duration", time.Since(start)))
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
	}
}

// noteAccess records what a request's access line says; a no-op without
// the access log.
func noteAccess(ctx context.Context, fill func(*accessEntry)) {
	if e, ok := ctx.Value(accessKey{}).(*accessEntry); ok {
		fill(e)
	}
}
