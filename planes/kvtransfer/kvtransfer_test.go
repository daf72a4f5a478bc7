package kvtransfer

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/health"
)

func newMocker(t testing.TB, bytesPerToken int) *mocker.Engine {
	t.Helper()
	e, err := mocker.New(mocker.Config{Instant: true, KVBytesPerToken: bytesPerToken, KVCapacityTokens: 64 * 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func prompt(n, salt int) []engine.Token {
	p := make([]engine.Token, n)
	for i := range p {
		p[i] = engine.Token((i*7 + salt) % 1000)
	}
	return p
}

// prefill fills e's prefix cache with p, as a prefill-only request does.
func prefill(t testing.TB, e engine.Engine, p []engine.Token) {
	t.Helper()
	st, err := e.Generate(context.Background(), &engine.Request{Prompt: p, MaxTokens: 1, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Recv(); err == io.EOF {
			return
		} else if err != nil {
			t.Fatal(err)
		}
	}
}

// testNodeTimeout bounds a node's waits in tests; TestTransferMemoryRSS's
// child raises it, since 1.4 GB through two 128 MiB budgets on a loaded
// 2-core box can wait longer than 5 s for budget without anything wrong.
var testNodeTimeout = 5 * time.Second

func newNode(t testing.TB, id string, port engine.KVPort, budget int64, board *health.Board, listen bool) *Node {
	t.Helper()
	n, err := NewNode(Config{ID: id, Port: port, Budget: NewBudget(budget), Board: board, Timeout: testNodeTimeout, ProbeBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if listen {
		if err := n.Listen("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

func TestSend(t *testing.T) {
	const bs, bpt = 16, 4096
	tests := []struct {
		name       string
		tokens     int
		dstHas     int // blocks the receiver caches already
		from       int
		wantBlocks int
	}{
		{"all blocks", 160, 0, 0, 10},
		{"only the missing blocks", 160, 6, 6, 4},
		{"nothing missing", 160, 10, 10, 0},
		{"one block", 16, 0, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := newMocker(t, bpt), newMocker(t, bpt)
			p := prompt(tc.tokens+5, 1)
			prefill(t, src, p)
			if tc.dstHas > 0 {
				prefill(t, dst, p[:tc.dstHas*bs+1])
			}
			board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
			a := newNode(t, "p0", src, 0, board, false)
			b := newNode(t, "d0", dst, 0, board, true)
			st, err := a.Send(context.Background(), Peer{ID: "d0", Addr: b.Addr()}, p[:tc.tokens], tc.from)
			if err != nil {
				t.Fatal(err)
			}
			if st.Blocks != tc.wantBlocks || st.Bytes != int64(tc.wantBlocks*bs*bpt) {
				t.Fatalf("sent %d blocks / %d B, want %d blocks", st.Blocks, st.Bytes, tc.wantBlocks)
			}
			got, err := dst.CachedPrefix(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.tokens {
				t.Fatalf("receiver caches %d tokens, want %d", got, tc.tokens)
			}
		})
	}
}

// corrupting flips one byte of every exported block after the engine
// wrote it: the checksum is still right, the content is not.
type corrupting struct{ *mocker.Engine }

func (c corrupting) ExportBlocks(ctx context.Context, tokens []engine.Token, from int, buf []byte, emit func(int) error) (int, error) {
	return c.Engine.ExportBlocks(ctx, tokens, from, buf, func(i int) error { buf[7]++; return emit(i) })
}

func TestSendFailures(t *testing.T) {
	// A listener that accepts and never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close()

	tests := []struct {
		name     string
		srcBytes int
		dstBytes int
		corrupt  bool
		addr     string // "" the receiver's node
		timeout  time.Duration
		code     string
	}{
		{"layout mismatch", 4096, 2048, false, "", time.Second, CodeLayoutMismatch},
		{"corrupt block", 4096, 4096, true, "", time.Second, CodeRejected},
		{"unreachable", 4096, 4096, false, closedAddr, time.Second, CodeFailed},
		{"receiver never answers", 4096, 4096, false, silent.Addr().String(), 300 * time.Millisecond, CodeTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := newMocker(t, tc.srcBytes), newMocker(t, tc.dstBytes)
			p := prompt(64, 2)
			prefill(t, src, p)
			board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
			var port engine.KVPort = src
			if tc.corrupt {
				port = corrupting{src}
			}
			a := newNode(t, "p0", port, 0, board, false)
			b := newNode(t, "d0", dst, 0, board, true)
			addr := tc.addr
			if addr == "" {
				addr = b.Addr()
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			_, err := a.Send(ctx, Peer{ID: "d0", Addr: addr}, p, 0)
			if CodeOf(err) != tc.code {
				t.Fatalf("err = %v, want code %s", err, tc.code)
			}
			if !board.IsActive(tc.code, "p0->d0") {
				t.Fatalf("%s not raised on the board", tc.code)
			}
			if n, _ := dst.CachedPrefix(context.Background(), p); n != 0 {
				t.Fatalf("receiver kept %d tokens of a failed transfer", n)
			}
		})
	}
}

func TestBudgetBoundsConcurrentTransfers(t *testing.T) {
	const bs, bpt, blocks, parallel = 16, 8192, 24, 6
	blockBytes := bs * bpt
	src, dst := newMocker(t, bpt), newMocker(t, bpt)
	limit := int64(3 * blockBytes)
	a := newNode(t, "p0", src, limit, nil, false)
	b := newNode(t, "d0", dst, limit, nil, true)
	var wg sync.WaitGroup
	errs := make(chan error, parallel)
	for i := range parallel {
		p := prompt(blocks*bs+1, 100+i)
		prefill(t, src, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := a.Send(context.Background(), Peer{ID: "d0", Addr: b.Addr()}, p[:blocks*bs], 0)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []*Node{a, b} {
		if st := n.Budget().Stats(); st.Peak > limit || st.InUse != 0 {
			t.Fatalf("%s: peak %d (limit %d), in use %d after all transfers", n.ID(), st.Peak, limit, st.InUse)
		}
	}
}

func TestBudget(t *testing.T) {
	b := NewBudget(100)
	x, err := b.Acquire(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.Acquire(ctx, 60); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("over-budget acquire: %v, want a wait that times out", err)
	}
	if _, err := b.Acquire(context.Background(), 101); err == nil {
		t.Fatal("a buffer larger than the budget was granted")
	}
	got := make(chan []byte)
	go func() { y, _ := b.Acquire(context.Background(), 60); got <- y }()
	time.Sleep(20 * time.Millisecond)
	b.Release(x)
	if y := <-got; len(y) != 60 {
		t.Fatalf("waiter got %d bytes", len(y))
	}
	if st := b.Stats(); st.Peak > 100 || st.Allocated != 60 {
		t.Fatalf("stats %+v: reuse should keep one 60-byte buffer", st)
	}
}

func TestThroughputProbeAndEWMA(t *testing.T) {
	src, dst := newMocker(t, 16384), newMocker(t, 16384)
	a := newNode(t, "p0", src, 0, nil, false)
	b := newNode(t, "d0", dst, 0, nil, true)
	peer := Peer{ID: "d0", Addr: b.Addr()}
	bps, err := a.Throughput(context.Background(), peer)
	if err != nil || bps <= 0 {
		t.Fatalf("probe: %v, %v", bps, err)
	}
	p := prompt(1024+1, 3)
	prefill(t, src, p)
	if _, err := a.Send(context.Background(), peer, p[:1024], 0); err != nil {
		t.Fatal(err)
	}
	after, _ := a.Throughput(context.Background(), peer)
	if after == bps {
		t.Fatal("a 16 MiB transfer did not move the link estimate")
	}
}
