package kvtransfer

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
)

func cached(t *testing.T, e engine.KVPort, p []engine.Token) int {
	t.Helper()
	got, err := e.CachedPrefix(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestTransferToken: a receiver that requires tokens imports blocks only
// with a token it signed for that sender, that prompt, that first block,
// itself, once.
func TestTransferToken(t *testing.T) {

	p, other := prompt(64+1, 1), prompt(64+1, 2)
	mint := func(n *Node, sender string, tokens []engine.Token, from int) []byte {
		tok, err := n.MintToken(sender, tokens, from)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	stale := func(n *Node) []byte {
		tok := mint(n, "p0", p[:64], 0)
		// Re-sign with an expiry in the past, as a token kept too long.
		tok[16], tok[17], tok[18], tok[19], tok[20], tok[21], tok[22], tok[23] = 1, 0, 0, 0, 0, 0, 0, 0
		return append(tok[:24], tokenMAC(n.TokenKey(), "d0", "p0", 0, tok[:24], p[:64])...)
	}
	tests := []struct {
		name  string
		token func(dst, elsewhere *Node) []byte
		want  error
	}{
		{"valid", func(d, _ *Node) []byte { return mint(d, "p0", p[:64], 0) }, nil},
		{"no token", func(_, _ *Node) []byte { return nil }, ErrNoToken},
		{"another prompt's token", func(d, _ *Node) []byte { return mint(d, "p0", other[:64], 0) }, ErrBadToken},
		{"another sender's token", func(d, _ *Node) []byte { return mint(d, "p9", p[:64], 0) }, ErrBadToken},
		{"another first block", func(d, _ *Node) []byte { return mint(d, "p0", p[:64], 1) }, ErrBadToken},
		{"another receiver's token", func(_, e *Node) []byte { return mint(e, "p0", p[:64], 0) }, ErrBadToken},
		{"forged bytes", func(_, _ *Node) []byte { return make([]byte, tokenLen) }, ErrBadToken},
		{"expired", func(d, _ *Node) []byte { return stale(d) }, ErrTokenExpired},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := newMocker(t, 1024), newMocker(t, 1024)
			prefill(t, src, p)
			board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
			a := newNode(t, "p0", src, 0, nil, false)
			d, err := NewNode(Config{ID: "d0", Port: dst, Board: board, RequireToken: true, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
			if err := d.Listen("127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			e := newNode(t, "d0", newMocker(t, 1024), 0, nil, false) // same id, other key
			_, err = a.Send(context.Background(), Peer{ID: "d0", Addr: d.Addr(), Token: tc.token(d, e)}, p[:64], 0)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if got := cached(t, dst, p); got != 64 {
					t.Fatalf("receiver caches %d tokens, want 64", got)
				}
				return
			}
			if CodeOf(err) != CodeRejected || !strings.Contains(err.Error(), tc.want.Error()) {
				t.Fatalf("err = %v, want %s with %q", err, CodeRejected, tc.want)
			}
			if got := cached(t, dst, p); got != 0 {
				t.Fatalf("a refused transfer left %d tokens cached", got)
			}
			if !board.IsActive(CodeRejected, inboundSubject("d0")) {
				t.Fatal("the receiver raised no kv_transfer_rejected")
			}
			// The next good transfer clears it.
			if _, err := a.Send(context.Background(), Peer{ID: "d0", Addr: d.Addr(), Token: mint(d, "p0", p[:64], 0)}, p[:64], 0); err != nil {
				t.Fatal(err)
			}
			if board.IsActive(CodeRejected, inboundSubject("d0")) {
				t.Fatal("kv_transfer_rejected outlived an accepted transfer")
			}
		})
	}
	t.Run("replayed", func(t *testing.T) {
		src, dst := newMocker(t, 1024), newMocker(t, 1024)
		prefill(t, src, p)
		a := newNode(t, "p0", src, 0, nil, false)
		d, err := NewNode(Config{ID: "d0", Port: dst, RequireToken: true, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		if err := d.Listen("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		peer := Peer{ID: "d0", Addr: d.Addr(), Token: mint(d, "p0", p[:64], 0)}
		if _, err := a.Send(context.Background(), peer, p[:64], 0); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Send(context.Background(), peer, p[:64], 0); CodeOf(err) != CodeRejected || !strings.Contains(err.Error(), ErrTokenReused.Error()) {
			t.Fatalf("replay: %v", err)
		}
	})

}

// TestTransferTLS: with the cluster identity, the transfer plane admits
// only workers' certificates of the cluster CA.
func TestTransferTLS(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	if _, err := authn.Init(dir, 1, 2, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := authn.Init(other, 0, 1, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	load := func(dir, name string) *authn.Cluster {
		c, err := authn.Load(authn.Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	p := prompt(33, 3)
	tests := []struct {
		name   string
		sender *authn.Cluster // nil: plaintext
		ok     bool
	}{
		{"cluster worker", load(dir, "worker-2"), true},
		{"plaintext stranger", nil, false},
		{"frontend certificate", load(dir, "frontend-1"), false},
		{"another CA's worker", load(other, "worker-1"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := newMocker(t, 1024), newMocker(t, 1024)
			prefill(t, src, p)
			board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
			d, err := NewNode(Config{ID: "d0", Port: dst, Board: board, TLS: load(dir, "worker-1"), Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
			if err := d.Listen("127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			a, err := NewNode(Config{ID: "p0", Port: src, TLS: tc.sender, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = a.Close() })
			_, err = a.Send(context.Background(), Peer{ID: "d0", Addr: d.Addr()}, p[:32], 0)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
			if got := cached(t, dst, p); (got == 32) != tc.ok {
				t.Fatalf("receiver caches %d tokens", got)
			}
			if !tc.ok {
				deadline := time.Now().Add(2 * time.Second)
				for !board.IsActive(CodeRejected, inboundSubject("d0")) && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if !board.IsActive(CodeRejected, inboundSubject("d0")) {
					t.Fatal("the refused handshake raised nothing")
				}
			}
		})
	}
	// A raw TLS client without a certificate gets no frame through either.
	d := newNode(t, "d1", newMocker(t, 1024), 0, nil, false)
	d.cfg.TLS = load(dir, "worker-1")
	if err := d.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", d.Addr(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err == nil {
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		var b [1]byte
		_, err = c.Read(b[:])
		c.Close()
	}
	if err == nil {
		t.Fatal("a client without a certificate was served")
	}
}

// TestAllowPeer: a node never dials an address its AllowPeer refuses.
func TestAllowPeer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := lis.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	src := newMocker(t, 1024)
	p := prompt(33, 4)
	prefill(t, src, p)
	errRefused := errors.New("not a published transfer address")
	a, err := NewNode(Config{ID: "p0", Port: src, Timeout: 2 * time.Second, ProbeBytes: 1 << 10,
		AllowPeer: func(_ context.Context, addr string) error { return errRefused }})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	peer := Peer{ID: "x", Addr: lis.Addr().String()}
	if _, err := a.Send(context.Background(), peer, p[:32], 0); CodeOf(err) != CodeRefusedPeer || !errors.Is(err, errRefused) {
		t.Fatalf("send: %v", err)
	}
	if _, err := a.Probe(context.Background(), peer); CodeOf(err) != CodeRefusedPeer {
		t.Fatalf("probe: %v", err)
	}
	select {
	case <-accepted:
		t.Fatal("the node connected to a refused address")
	case <-time.After(50 * time.Millisecond):
	}
}
