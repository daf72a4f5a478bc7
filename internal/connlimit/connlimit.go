// Package connlimit bounds what strangers can hold of a listening port:
// a cap on open connections, the same cap per source address (so one
// process cannot take them all), a handshake deadline and an idle
// timeout. Every plane's listener (the KV transfer port, the request
// plane, the metrics port, the vLLM P/D side channel) is wrapped by Wrap
// rather than carrying its own copy; each refusal is counted
// (tandem_listener_refused_total{plane,reason}), open connections are a
// gauge (tandem_listener_connections{plane}), and a plane refusing
// connections raises DiagCapped (subject the plane) until its connections
// fall below nine tenths of the caps.
package connlimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/health"
)

// Diagnostic codes.
const (
	// DiagCapped: a listener refused connections at its global or
	// per-source cap; cleared when open connections fall below nine
	// tenths of the caps.
	DiagCapped = "listener_capped"
	// DiagAvailable is DiagCapped's recovery code.
	DiagAvailable = "listener_available"
)

var _ = health.Register(DiagCapped, DiagAvailable)

// Refusal and close reasons (tandem_listener_refused_total{reason}).
const (
	ReasonCap       = "cap"
	ReasonPerSource = "per_source"
	ReasonHandshake = "handshake"
	ReasonIdle      = "idle"
)

// Limits bound one listener. Zero fields are off.
type Limits struct {
	// MaxConns caps open connections; past it a connection is closed at
	// accept.
	MaxConns int
	// MaxPerSource caps open connections from one source IP address.
	MaxPerSource int
	// Handshake closes a connection that the server has not marked
	// Established this long after accept (a TLS handshake that never
	// finishes, a client that sends nothing).
	Handshake time.Duration
	// Idle closes a connection that read nothing this long.
	Idle time.Duration
}

// Defaults are the flag defaults: generous for the cluster's own
// connections, small enough that idle strangers cannot hold a worker's
// descriptors.
func Defaults() Limits {
	return Limits{MaxConns: 1024, MaxPerSource: 256, Handshake: 10 * time.Second, Idle: 5 * time.Minute}
}

// Metrics are the listeners' series, shared by every plane of a process.
type Metrics struct {
	open    *prometheus.GaugeVec
	refused *prometheus.CounterVec
}

// NewMetrics registers the series on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tandem_listener_connections",
			Help: "Open connections on a listening port, by plane."}, []string{"plane"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tandem_listener_refused_total",
			Help: "Connections refused or closed by a listener's limits, by plane and reason (cap, per_source, handshake, idle)."}, []string{"plane", "reason"}),
	}
	if reg != nil {
		// A second NewMetrics on one registry shares the first's series.
		if err := reg.Register(m.open); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if g, ok := are.ExistingCollector.(*prometheus.GaugeVec); ok {
					m.open = g
				}
			}
		}
		if err := reg.Register(m.refused); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if c, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
					m.refused = c
				}
			}
		}
	}
	return m
}

// Listener is a net.Listener with Limits.
type Listener struct {
	net.Listener
	plane string
	lim   Limits
	board *health.Board
	m     *Metrics
	log   *slog.Logger

	mu       sync.Mutex
	conns    map[*Conn]struct{}
	bySource map[string]int
	capped   bool
	warned   map[string]bool // sources logged once per capped episode
	done     chan struct{}
	closed   sync.Once
}

// Wrap applies lim to l; plane names it in metrics, logs and the
// diagnostic. board, m and log may be nil.
func Wrap(l net.Listener, plane string, lim Limits, board *health.Board, m *Metrics, log *slog.Logger) *Listener {
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = slog.Default()
	}
	w := &Listener{Listener: l, plane: plane, lim: lim, board: board, m: m, log: log,
		conns: map[*Conn]struct{}{}, bySource: map[string]int{}, warned: map[string]bool{}, done: make(chan struct{})}
	m.open.WithLabelValues(plane).Set(0)
	if tick := w.tick(); tick > 0 {
		go w.reap(tick)
	}
	return w
}

// tick is how often deadlines are checked: a quarter of the shortest.
func (l *Listener) tick() time.Duration {
	var d time.Duration
	for _, t := range []time.Duration{l.lim.Handshake, l.lim.Idle} {
		if t > 0 && (d == 0 || t < d) {
			d = t
		}
	}
	if d == 0 {
		return 0
	}
	return min(max(d/4, 10*time.Millisecond), time.Second)
}

// Accept returns the next connection within the caps; connections past
// them are closed here, before the server sees a byte.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceOf(c.RemoteAddr())
		l.mu.Lock()
		reason := ""
		switch {
		case l.lim.MaxConns > 0 && len(l.conns) >= l.lim.MaxConns:
			reason = ReasonCap
		case l.lim.MaxPerSource > 0 && l.bySource[src] >= l.lim.MaxPerSource:
			reason = ReasonPerSource
		}
		if reason != "" {
			first := !l.warned[src]
			l.warned[src] = true
			raise := !l.capped
			l.capped = true
			n := len(l.conns)
			l.mu.Unlock()
			// Counted and raised before the close, so whoever sees the
			// connection refused also sees why.
			l.m.refused.WithLabelValues(l.plane, reason).Inc()
			if first {
				l.log.Warn("refusing connections past the listener's cap", "diagnostic_code", DiagCapped, "plane", l.plane,
					"source", src, "reason", reason, "open", n, "max", l.lim.MaxConns, "max_per_source", l.lim.MaxPerSource)
			}
			if raise && l.board != nil {
				l.board.Raise(DiagCapped, l.plane, health.Warn, fmt.Sprintf("refusing connections: %d open (cap %d, %d per source)", n, l.lim.MaxConns, l.lim.MaxPerSource))
			}
			_ = c.Close()
			continue
		}
		now := time.Now().UnixNano()
		wc := &Conn{Conn: c, l: l, src: src, accepted: now}
		wc.last.Store(now)
		if l.lim.Handshake <= 0 {
			wc.established.Store(true)
		}
		l.conns[wc] = struct{}{}
		l.bySource[src]++
		l.m.open.WithLabelValues(l.plane).Set(float64(len(l.conns)))
		l.mu.Unlock()
		return wc, nil
	}
}

// Close stops accepting.
func (l *Listener) Close() error {
	l.closed.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// Open is the number of open connections.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

func (l *Listener) forget(c *Conn) {
	l.mu.Lock()
	if _, ok := l.conns[c]; !ok {
		l.mu.Unlock()
		return
	}
	delete(l.conns, c)
	if l.bySource[c.src]--; l.bySource[c.src] <= 0 {
		delete(l.bySource, c.src)
	}
	n := len(l.conns)
	l.m.open.WithLabelValues(l.plane).Set(float64(n))
	clear := l.capped && (l.lim.MaxConns <= 0 || n < l.lim.MaxConns*9/10) && l.belowPerSourceLocked()
	if clear {
		l.capped = false
		l.warned = map[string]bool{}
	}
	l.mu.Unlock()
	if clear && l.board != nil {
		l.board.Clear(DiagCapped, l.plane, DiagAvailable, "open connections are below the caps again")
	}
}

func (l *Listener) belowPerSourceLocked() bool {
	if l.lim.MaxPerSource <= 0 {
		return true
	}
	for _, n := range l.bySource {
		if n >= max(l.lim.MaxPerSource*9/10, 1) {
			return false
		}
	}
	return true
}

// reap closes connections past their handshake deadline or idle timeout.
func (l *Listener) reap(tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
		}
		now := time.Now().UnixNano()
		var expired []*Conn
		var reasons []string
		l.mu.Lock()
		for c := range l.conns {
			switch {
			case !c.established.Load() && l.lim.Handshake > 0 && now-c.accepted > int64(l.lim.Handshake):
				expired, reasons = append(expired, c), append(reasons, ReasonHandshake)
			case l.lim.Idle > 0 && now-c.last.Load() > int64(l.lim.Idle):
				expired, reasons = append(expired, c), append(reasons, ReasonIdle)
			}
		}
		l.mu.Unlock()
		for i, c := range expired {
			l.m.refused.WithLabelValues(l.plane, reasons[i]).Inc()
			_ = c.Close()
		}
	}
}

// Conn is a connection accepted within the limits.
type Conn struct {
	net.Conn
	l           *Listener
	src         string
	accepted    int64
	last        atomic.Int64 // unix nanoseconds of the last read
	established atomic.Bool
	once        sync.Once
}

func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// Close closes the connection and frees its place under the caps.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.forget(c) })
	return err
}

// Establish marks the connection as past its handshake (the TLS
// handshake done, the first request read): the handshake deadline no
// longer applies, the idle timeout does.
func (c *Conn) Establish() { c.established.Store(true) }

// Established marks c (or the limited connection under it, through TLS
// and other wrappers with NetConn) as past its handshake; other
// connections are left alone.
func Established(c net.Conn) {
	for c != nil {
		if lc, ok := c.(*Conn); ok {
			lc.Establish()
			return
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return
		}
		c = u.NetConn()
	}
}

func sourceOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}

// EstablishOnRequest is an http.Server's ConnState: a connection that
// delivered a request is past its handshake.
func EstablishOnRequest(c net.Conn, st http.ConnState) {
	if st == http.StateActive {
		Established(c)
	}
}
