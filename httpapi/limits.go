package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/openai"
)

// HTTPLimits bound what one client, or many, can hold of the server.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request (headers and body); the
	// deadline is lifted once the body is read, so it never cuts a stream.
	ReadTimeout time.Duration
	// WriteIdleTimeout bounds each write of a response: a client that
	// reads nothing for this long is cut, however long its stream runs.
	WriteIdleTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout time.Duration
	// MaxConns caps open client connections (0: no cap). Past it a
	// connection gets a 503 and is closed at once, so file descriptors
	// stay free for the connections being served.
	MaxConns int
	// ProbeConns are kept past MaxConns for /health, /live and /metrics
	// (--probe-connections): while MaxConns are open, a new connection
	// takes one of these, may ask only for those paths, and is closed
	// after its answer or ProbeConnLife, so probes and scrapes answer
	// however full the server is. 0: none.
	ProbeConns int
	// BodyBudget bounds the bytes of request bodies being read and decoded
	// at once, across the whole server (0: no budget). A body that does
	// not fit is a 503 with Retry-After, so many slow large bodies cannot
	// exhaust memory.
	BodyBudget int64
}

// DefaultHTTPLimits returns the flag defaults.
func DefaultHTTPLimits() HTTPLimits {
	return HTTPLimits{
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second, WriteIdleTimeout: 60 * time.Second,
		IdleTimeout: 120 * time.Second, MaxConns: 4096, ProbeConns: 16, BodyBudget: 256 << 20,
	}
}

// NewHTTPServer returns the frontend's http.Server on lis, with every limit
// applied: timeouts on the server, the connection cap on the listener it
// returns (serve that one). Kept in one place so that TLS and
// authentication wrap one function.
func (s *Server) NewHTTPServer(lis net.Listener) (*http.Server, net.Listener) {
	l := s.cfg.HTTP
	handler := s.Handler()
	if l.MaxConns > 0 {
		cl := &capListener{Listener: lis, sem: make(chan struct{}, l.MaxConns), refused: s.metrics.connsRefused, probes: s.metrics.probeConns,
			diag: flag{board: s.board, code: DiagConnCap, recovered: DiagConnAvailable, msg: fmt.Sprintf("%d client connections are open (--max-connections); new ones get 503", l.MaxConns)}}
		if l.ProbeConns > 0 {
			cl.reserve = make(chan struct{}, l.ProbeConns)
			handler = probeGate(handler)
		}
		lis = cl
	}
	srv := &http.Server{
		Handler:           handler,
		ConnContext:       markProbeConn,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		IdleTimeout:       l.IdleTimeout,
		// WriteTimeout stays 0: it would bound a whole stream. Each write
		// is bounded instead (WriteIdleTimeout).
	}
	return srv, lis
}

// Diagnostic codes of the HTTP limits (subject "http").
const (
	// DiagConnCap: the connection cap was reached and connections are
	// being refused; cleared when open connections fall below 90% of it.
	DiagConnCap = "frontend_connections_capped"
	// DiagBodyBudget: request bodies filled the server's body budget and
	// requests are being refused; cleared when half of it is free again.
	DiagBodyBudget = "frontend_body_budget_exhausted"
)

// flag is a limit's diagnostic: raised when the limit refuses work,
// cleared (once) when the pressure is gone.
type flag struct {
	board     *health.Board
	code      string
	recovered string
	msg       string
	active    atomic.Bool
}

func (f *flag) raise() {
	if f.board != nil && f.active.CompareAndSwap(false, true) {
		f.board.Raise(f.code, "http", health.Warn, f.msg)
	}
}

func (f *flag) clear() {
	if f.board != nil && f.active.Load() && f.active.CompareAndSwap(true, false) {
		f.board.Clear(f.code, "http", f.recovered, "the limit has room again")
	}
}

// capListener refuses connections past its cap: it accepts them (the
// kernel already did), writes a 503 and closes, rather than leaving them
// in the backlog where a client's timeout is the only answer.
type capListener struct {
	net.Listener
	sem     chan struct{}
	reserve chan struct{} // nil: no probe reserve
	refused interface{ Inc() }
	probes  interface{ Inc() }
	diag    flag
}

// ProbeConnLife bounds a connection taken from the probe reserve (TLS
// handshake, request and answer included), so strangers holding idle
// connections cannot keep the reserve.
const ProbeConnLife = 5 * time.Second

// probePaths are what a reserved connection may ask for.
var probePaths = map[string]bool{"/health": true, "/live": true, "/metrics": true}

type probeConnKey struct{}

// markProbeConn is http.Server.ConnContext: it marks requests that arrive
// on a reserved connection (under TLS, the capConn is the tls.Conn's).
func markProbeConn(ctx context.Context, c net.Conn) context.Context {
	for c != nil {
		if cc, ok := c.(*capConn); ok {
			if cc.probe {
				return context.WithValue(ctx, probeConnKey{}, true)
			}
			return ctx
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return ctx
		}
		c = u.NetConn()
	}
	return ctx
}

// probeGate answers only probe paths on reserved connections, and closes
// them after the answer.
func probeGate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(probeConnKey{}) == nil {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		if !probePaths[r.URL.Path] {
			w.Header().Set("Retry-After", "1")
			openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: "service_unavailable", Code: "too_many_connections",
				Message: "too many open connections; this one is kept for /health, /live and /metrics", RetryAfter: 1})
			return
		}
		next.ServeHTTP(w, r)
	})
}

var tooManyConns = func() []byte {
	body := `{"error":{"message":"too many open connections","type":"service_unavailable","param":null,"code":"too_many_connections"}}` + "\n"
	return []byte(fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
}()

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.sem <- struct{}{}:
			return &capConn{Conn: c, release: l.release}, nil
		default:
		}
		if l.reserve != nil {
			select {
			case l.reserve <- struct{}{}:
				l.probes.Inc()
				// A timer, not a deadline: the server resets deadlines
				// per request.
				kill := time.AfterFunc(ProbeConnLife, func() { _ = c.Close() })
				return &capConn{Conn: c, probe: true, release: func() { kill.Stop(); <-l.reserve }}, nil
			default:
			}
		}
		l.refused.Inc()
		l.diag.raise()
		go func() {
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = c.Write(tooManyConns)
			_ = c.Close()
		}()
	}
}

func (l *capListener) release() {
	<-l.sem
	if len(l.sem) < cap(l.sem)*9/10 {
		l.diag.clear()
	}
}

type capConn struct {
	net.Conn
	probe   bool // taken from the probe reserve
	once    sync.Once
	release func()
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// bodyBudget is a server-wide byte budget for request bodies in memory.
type bodyBudget struct {
	max  int64
	used atomic.Int64
	diag flag
}

func (b *bodyBudget) take(n int64) bool {
	if b == nil || b.max <= 0 {
		return true
	}
	if b.used.Add(n) > b.max {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *bodyBudget) give(n int64) {
	if b != nil && b.max > 0 {
		if b.used.Add(-n) < b.max/2 {
			b.diag.clear()
		}
	}
}

// bodyChunk is how much of the budget a body of unknown length takes at a
// time: a body is never held beyond what was reserved for it.
const bodyChunk = 64 << 10

var errBudget = errors.New("request body budget exhausted")

// readBody reads a request body within MaxBodyBytes and the server's body
// budget. release returns the body's reservation; call it once the body
// is decoded.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body []byte, release func(), e *openai.Error) {
	limit := s.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, func() {}, openai.TooLarge("", "request_too_large", "request body exceeds %d bytes", limit)
	}
	var held int64
	release = func() { s.budget.give(held); held = 0 }
	grow := func(n int64) bool {
		if !s.budget.take(n) {
			return false
		}
		held += n
		return true
	}
	size := int64(bodyChunk)
	if r.ContentLength >= 0 {
		size = r.ContentLength + 1 // +1: reading to EOF needs room for one more byte
	}
	if !grow(size) {
		s.metrics.bodyRefused.Inc()
		s.budget.diag.raise()
		return nil, release, openai.Unavailable("server_busy", s.cfg.RetryAfter, "the server is reading too many request bodies; retry shortly")
	}
	buf := make([]byte, 0, size)
	rd := http.MaxBytesReader(w, r.Body, limit)
	for {
		if len(buf) == cap(buf) {
			if !grow(bodyChunk) {
				s.metrics.bodyRefused.Inc()
				s.budget.diag.raise()
				return nil, release, openai.Unavailable("server_busy", s.cfg.RetryAfter, "the server is reading too many request bodies; retry shortly")
			}
			nb := make([]byte, len(buf), cap(buf)+bodyChunk)
			copy(nb, buf)
			buf = nb
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, release, openai.TooLarge("", "request_too_large", "request body exceeds %d bytes", limit)
			}
			return nil, release, openai.BadRequest("", "invalid_body", "reading the request body: %v", err)
		}
	}
	// The body is in: the read deadline must not cut the response (the
	// server's background read would cancel the request's context).
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	return buf, release, nil
}
