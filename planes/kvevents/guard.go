package kvevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"

	"github.com/tandemllm/tandem/planes/kvevents/event"

	"github.com/tandemllm/tandem/internal/connlimit"
)

// A bound SUB socket (--kv-events-bind) takes events from whoever
// connects, and a stranger's BlockStored would steer the router. ZMTP's
// NULL mechanism authenticates nobody, and go-zeromq/zmq4 has no CURVE, so
// the Listener's story is the network's: it binds loopback unless an
// allowlist of source networks is given, and with one it closes every TCP
// connection from outside the list at accept, before the ZMTP handshake
// (so a stranger never reaches the socket's message queue). The check runs
// in a zmq4 transport of its own (guardedTCP) that wraps net.Listen.

// guardScheme is the zmq4 transport name of a guarded tcp listener.
const guardScheme = "tandem-guarded-tcp"

var registerGuard = sync.OnceValue(func() error {
	return zmq4.RegisterTransport(guardScheme, guardedTCP{tcp: transport.New("tcp")})
})

type guardKey struct{}

// guard decides which sources a Listener accepts.
type guard struct {
	allow   []netip.Prefix
	log     *slog.Logger
	refused atomic.Uint64
	// open counts admitted connections not yet closed.
	open atomic.Int64
	// lim, if set, caps the admitted connections (internal/connlimit),
	// under plane's name.
	lim         *connlimit.Limits
	plane       string
	connMetrics *connlimit.Metrics

	mu     sync.Mutex
	logged map[netip.Addr]bool
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

func (g *guard) admits(a net.Addr) bool {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap()
	for _, p := range g.allow {
		if p.Contains(ip) {
			return true
		}
	}
	g.refused.Add(1)
	g.mu.Lock()
	first := !g.logged[ip] && len(g.logged) < 1024
	if first {
		g.logged[ip] = true
	}
	g.mu.Unlock()
	if first {
		g.log.Warn("refused a KV event publisher from outside the allowed networks (--kv-events-allow)", "source", ip.String(), "allowed", fmt.Sprint(g.allow))
	}
	return false
}

// guardedTCP is zmq4's tcp transport whose listeners refuse sources the
// socket context's guard does not admit.
type guardedTCP struct{ tcp transport.Transport }

func (t guardedTCP) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	return t.tcp.Dial(ctx, d, addr)
}

func (t guardedTCP) Addr(ep string) (string, error) { return t.tcp.Addr(ep) }

func (t guardedTCP) Listen(ctx context.Context, addr string) (net.Listener, error) {
	g, _ := ctx.Value(guardKey{}).(*guard)
	if g == nil {
		return nil, errors.New("kvevents: a guarded listener without its guard")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	var lis net.Listener = &guardedListener{Listener: l, g: g}
	if g.lim != nil {
		// The replay socket's caps (PublisherConfig.ReplayLimits), on the
		// connections the guard admitted.
		lis = connlimit.Wrap(lis, g.plane, *g.lim, nil, g.connMetrics, g.log)
	}
	return lis, nil
}

type guardedListener struct {
	net.Listener
	g *guard
}

// Accept returns the next admitted connection; others are closed at once.
func (l *guardedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.g.admits(c.RemoteAddr()) {
			l.g.open.Add(1)
			return &countedConn{Conn: c, g: l.g}, nil
		}
		c.Close()
	}
}

// countedConn keeps guard.open true: it leaves the count once, at its
// first Close (zmq4 closes a dropped connection from more than one place).
type countedConn struct {
	net.Conn
	g      *guard
	closed atomic.Bool
}

func (c *countedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.g.open.Add(-1)
	}
	return c.Conn.Close()
}

// ParseAllow parses --kv-events-allow values (event.ParseAllow, which
// links no transport, so the router's flags can use it too).
func ParseAllow(values []string) ([]netip.Prefix, error) { return event.ParseAllow(values) }

// guardEndpoint checks a bind endpoint against the policy and returns the
// endpoint zmq4 listens on (the guarded scheme) and the guard: loopback
// binds take loopback sources; any other bind needs an allowlist.
func guardEndpoint(endpoint string, allow []netip.Prefix, log *slog.Logger) (string, *guard, error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return "", nil, fmt.Errorf("kvevents: bind %q: want tcp://host:port", endpoint)
	}
	host, _, err := net.SplitHostPort(rest)
	if err != nil {
		return "", nil, fmt.Errorf("kvevents: bind %q: %w", endpoint, err)
	}
	if len(allow) == 0 {
		if !isLoopbackHost(host) {
			return "", nil, fmt.Errorf("kvevents: refusing to bind KV events on %s, reachable from other hosts, without --kv-events-allow CIDR (ZMQ's NULL mechanism authenticates nobody: anyone who connects could feed the router events)", endpoint)
		}
		allow = loopback
	}
	if err := registerGuard(); err != nil {
		return "", nil, err
	}
	return guardScheme + "://" + rest, &guard{allow: allow, log: log, logged: map[netip.Addr]bool{}}, nil
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.IsLoopback()
}
