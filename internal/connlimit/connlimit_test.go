package connlimit

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemllm/tandem/health"
)

// serve accepts on l and echoes, marking connections established after
// their first byte, until l closes.
func serve(l *Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			b := make([]byte, 1)
			for {
				if _, err := c.Read(b); err != nil {
					return
				}
				Established(c)
				if _, err := c.Write(b); err != nil {
					return
				}
			}
		}()
	}
}

// closedByServer reports whether the server closes c within d.
func closedByServer(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return err == nil
}

func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestLimits(t *testing.T) {
	second := "127.0.0.3"
	if l, err := net.Listen("tcp", second+":0"); err != nil {
		t.Skipf("no second loopback address: %v", err)
	} else {
		l.Close()
	}
	cases := []struct {
		name   string
		lim    Limits
		run    func(t *testing.T, addr string)
		reason string
	}{
		{"per source: one address cannot take the global cap", Limits{MaxConns: 4, MaxPerSource: 2}, func(t *testing.T, addr string) {
			a1, a2 := dialFrom(t, "127.0.0.1", addr), dialFrom(t, "127.0.0.1", addr)
			a3 := dialFrom(t, "127.0.0.1", addr)
			if !closedByServer(a3, 2*time.Second) {
				t.Fatal("a third connection from one source was kept")
			}
			b := dialFrom(t, second, addr)
			if _, err := b.Write([]byte{1}); err != nil {
				t.Fatal(err)
			}
			_ = b.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := b.Read(make([]byte, 1)); err != nil {
				t.Fatalf("another source was refused: %v", err)
			}
			_, _ = a1, a2
		}, ReasonPerSource},
		{"global cap", Limits{MaxConns: 2}, func(t *testing.T, addr string) {
			dialFrom(t, "127.0.0.1", addr)
			dialFrom(t, second, addr)
			if c := dialFrom(t, second, addr); !closedByServer(c, 2*time.Second) {
				t.Fatal("a connection past the cap was kept")
			}
		}, ReasonCap},
		{"handshake deadline", Limits{Handshake: 100 * time.Millisecond}, func(t *testing.T, addr string) {
			c := dialFrom(t, "127.0.0.1", addr)
			start := time.Now()
			if !closedByServer(c, 3*time.Second) {
				t.Fatal("a silent connection outlived the handshake deadline")
			}
			t.Logf("closed after %v", time.Since(start).Round(time.Millisecond))
		}, ReasonHandshake},
		{"idle timeout", Limits{Handshake: time.Second, Idle: 150 * time.Millisecond}, func(t *testing.T, addr string) {
			c := dialFrom(t, "127.0.0.1", addr)
			if _, err := c.Write([]byte{1}); err != nil {
				t.Fatal(err)
			}
			if !closedByServer(c, 3*time.Second) {
				t.Fatal("an idle connection was kept")
			}
		}, ReasonIdle},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
			raw, err := net.Listen("tcp", "0.0.0.0:0")
			if err != nil {
				t.Fatal(err)
			}
			m := NewMetrics(reg)
			l := Wrap(raw, "test", tc.lim, board, m, slog.New(slog.DiscardHandler))
			defer l.Close()
			go serve(l)
			_, port, _ := net.SplitHostPort(raw.Addr().String())
			tc.run(t, net.JoinHostPort("127.0.0.1", port))
			if got := testutil.ToFloat64(m.refused.WithLabelValues("test", tc.reason)); got < 1 {
				t.Fatalf("no refusal counted for %s", tc.reason)
			}
			capped := tc.reason == ReasonCap || tc.reason == ReasonPerSource
			if board.IsActive(DiagCapped, "test") != capped {
				t.Fatalf("diagnostic %s active %v, want %v", DiagCapped, board.IsActive(DiagCapped, "test"), capped)
			}
		})
	}
}

// After a flood of idle connections ends, the diagnostic clears and the
// open gauge is back to zero.
func TestFloodClears(t *testing.T) {
	reg := prometheus.NewRegistry()
	board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(reg)
	l := Wrap(raw, "flood", Limits{MaxConns: 8, MaxPerSource: 8, Handshake: 200 * time.Millisecond}, board, m, slog.New(slog.DiscardHandler))
	defer l.Close()
	go serve(l)
	var flood []net.Conn
	for range 32 {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for board.IsActive(DiagCapped, "flood") || l.Open() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after the flood: %d open, diagnostic %v", l.Open(), board.IsActive(DiagCapped, "flood"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if testutil.ToFloat64(m.refused.WithLabelValues("flood", ReasonCap))+testutil.ToFloat64(m.refused.WithLabelValues("flood", ReasonPerSource)) < 1 {
		t.Fatal("no refusal counted")
	}
}
