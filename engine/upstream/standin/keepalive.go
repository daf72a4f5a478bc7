package standin

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// keepAlive is a server's keep-alive timeout as the engines' HTTP servers
// apply it: llama-server's cpp-httplib answers "Keep-Alive: timeout=5"
// and closes a connection idle for CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND
// (5 s; vendor/cpp-httplib/httplib.h, keep_alive's select on the socket);
// vLLM's and SGLang's uvicorn close one idle for timeout_keep_alive (5 s).
// A client that keeps idle connections longer sends, now and then, a
// request into a connection the server is closing: the request goes out
// and the connection ends before any byte of the answer. The stand-in
// makes that race happen every time: a request that arrives on a
// connection idle for the timeout or more is closed unanswered (the
// server's timeout fired as it arrived), and counted. Connections are not
// closed while idle otherwise, so the race is the only way they end.
type keepAlive struct {
	timeout time.Duration
	closed  atomic.Int64
}

type connKey struct{}

// connIdle is when the connection's last answer ended (zero: none yet).
type connIdle struct {
	mu   sync.Mutex
	last time.Time
}

// install sets srv up for keep-alive with k's timeout (k nil: none).
func (k *keepAlive) install(srv *http.Server) {
	if k == nil || k.timeout <= 0 {
		return
	}
	srv.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, &connIdle{})
	}
	h := srv.Handler
	secs := max(int(k.timeout/time.Second), 1)
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ci, _ := r.Context().Value(connKey{}).(*connIdle)
		if ci != nil {
			ci.mu.Lock()
			last := ci.last
			ci.mu.Unlock()
			if !last.IsZero() && time.Since(last) >= k.timeout {
				if hj, ok := w.(http.Hijacker); ok {
					if c, _, err := hj.Hijack(); err == nil {
						k.closed.Add(1)
						c.Close()
						return
					}
				}
			}
		}
		w.Header().Set("Keep-Alive", fmt.Sprintf("timeout=%d", secs))
		h.ServeHTTP(w, r)
		if ci != nil {
			ci.mu.Lock()
			ci.last = time.Now()
			ci.mu.Unlock()
		}
	})
}

// idleClosed counts requests closed unanswered on an idle connection.
func (k *keepAlive) idleClosed() int64 {
	if k == nil {
		return 0
	}
	return k.closed.Load()
}
