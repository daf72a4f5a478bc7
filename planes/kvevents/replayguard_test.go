package kvevents

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tandemllm/tandem/internal/connlimit"
)

// TestReplayGuard is issue 33's third finding: the replay ROUTER handed
// past batches (prompts, with token ids) to any process that asked. With
// token ids in the events (GuardReplay): a bind beyond loopback without
// --kv-events-replay-allow is refused at start, a source outside the
// allowed networks is closed at accept, and a request without the replay
// token is answered with the end marker only; a router with the token
// gets the history.
func TestReplayGuard(t *testing.T) {
	t.Run("bind beyond loopback without an allowlist", func(t *testing.T) {
		_, err := NewPublisher(context.Background(), PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://0.0.0.0:0", GuardReplay: true})
		if err == nil || !strings.Contains(err.Error(), "--kv-events-replay-allow") {
			t.Fatalf("err %v, want a refusal naming --kv-events-replay-allow", err)
		}
	})
	t.Run("source outside the allowlist", func(t *testing.T) {
		if l, err := net.Listen("tcp", "127.0.0.3:0"); err != nil {
			t.Skipf("no second loopback address: %v", err)
		} else {
			l.Close()
		}
		p := newTestPublisher(t, PublisherConfig{ReplayEndpoint: "tcp://0.0.0.0:0", GuardReplay: true,
			ReplayAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(p.ReplayEndpoint(), "tcp://"))
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}, Timeout: 2 * time.Second}
		c, err := d.Dial("tcp", net.JoinHostPort("127.0.0.1", port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Read(make([]byte, 64)); err == nil {
			t.Fatal("the stranger's connection got a ZMTP greeting")
		}
		if p.ReplayRefused() == 0 {
			t.Fatal("the refusal was not counted")
		}
	})
	t.Run("idle connections are bounded in time", func(t *testing.T) {
		// zmq4 reads each connection's ZMTP greeting before it accepts the
		// next, so one silent connection stalls the socket: the bound on
		// a connection's life is what keeps it answering.
		p := newTestPublisher(t, PublisherConfig{ReplayEndpoint: "tcp://127.0.0.1:0", GuardReplay: true,
			ReplayLimits: connlimit.Limits{MaxConns: 8, MaxPerSource: 4, Handshake: 200 * time.Millisecond}})
		addr := strings.TrimPrefix(p.ReplayEndpoint(), "tcp://")
		var conns []net.Conn
		for range 4 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			conns = append(conns, c)
		}
		start := time.Now()
		for _, c := range conns {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.Copy(io.Discard, c); err != nil {
				t.Fatalf("an idle replay connection outlived its bound: %v", err)
			}
		}
		t.Logf("4 silent connections closed by the server within %v", time.Since(start).Round(time.Millisecond))
	})
	for _, tc := range []struct {
		name    string
		token   []byte
		batches int
	}{{"request without the token", nil, 0}, {"wrong token", []byte("guess"), 0}, {"router with the token", []byte("router-token-0123456789abcdef"), 3}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPublisher(t, PublisherConfig{ReplayEndpoint: "tcp://127.0.0.1:0", GuardReplay: true,
				ReplayToken: []byte("router-token-0123456789abcdef")})
			for i := range 3 {
				p.Publish([]byte{byte(i)})
			}
			for deadline := time.Now().Add(5 * time.Second); p.Stats().Published < 3; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("batches not published")
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			dealer := zmq4.NewDealer(ctx)
			defer dealer.Close()
			if err := dealer.Dial(p.ReplayEndpoint()); err != nil {
				t.Fatal(err)
			}
			frames := [][]byte{{}, be8(0)}
			if tc.token != nil {
				frames = append(frames, tc.token)
			}
			if err := dealer.SendMulti(zmq4.NewMsgFrom(frames...)); err != nil {
				t.Fatal(err)
			}
			rep := receiver(dealer)
			got := 0
			for {
				m := next(t, rep)
				if len(m.Frames) == 4 && string(m.Frames[2]) == string(be8(EndSeq)) {
					break
				}
				got++
			}
			if got != tc.batches {
				t.Fatalf("%d batches replayed, want %d", got, tc.batches)
			}
			if (tc.batches == 0) != (p.ReplayRefused() > 0) {
				t.Fatalf("refused %d", p.ReplayRefused())
			}
		})
	}
}
