package requestplane

import (
	"context"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/planes/kvtransfer"
)

// testWorker is a mocker with its transfer node, served on a request plane
// with its kvtransfer.Local, as a worker process serves it.
type testWorker struct {
	eng  *mocker.Engine
	node *kvtransfer.Node
	side *Side
}

func startWorker(t *testing.T, id string, listen bool) *testWorker {
	t.Helper()
	eng, err := mocker.New(mocker.Config{Speedup: 100, KVBytesPerToken: 1024, KVCapacityTokens: 16 * 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	node, err := kvtransfer.NewNode(kvtransfer.Config{ID: id, Port: eng, Timeout: 5 * time.Second, ProbeBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	if listen {
		if err := node.Listen("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	local, err := kvtransfer.NewLocal(kvtransfer.Worker{ID: id, Engine: eng, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	c := serveWith(t, eng, local)
	return &testWorker{eng: eng, node: node, side: NewSide(c, SideDesc{ID: id, Layout: local.Layout(),
		BlockSize: local.BlockSize(), BlockBytes: local.BlockBytes(), TransferAddr: node.Addr()})}
}

func drain(t *testing.T, g engine.Generator, req *engine.Request) int {
	t.Helper()
	st, err := g.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	cached := 0
	for {
		d, err := st.Recv()
		if err == io.EOF {
			return cached
		}
		if err != nil {
			t.Fatal(err)
		}
		cached = max(cached, d.CachedTokens)
	}
}

func tokens(n int) []engine.Token {
	p := make([]engine.Token, n)
	for i := range p {
		p[i] = engine.Token(i*31%900 + 1)
	}
	return p
}

// TestSideOverTheWire: every kvtransfer.Side call a frontend makes reaches the
// worker's Local and comes back intact.
func TestSideOverTheWire(t *testing.T) {
	ctx := context.Background()
	pre, dec := startWorker(t, "p0", false), startWorker(t, "d0", true)
	p := tokens(400)
	drain(t, dec.eng, &engine.Request{Prompt: p[:161], MaxTokens: 1}) // d0 holds 10 blocks

	a, err := dec.side.Assess(ctx, p, 15)
	if err != nil {
		t.Fatal(err)
	}
	want := kvtransfer.Assessment{CachedTokens: 160, UncachedSeconds: dec.eng.EstimatePrefill(400 - 160),
		TailSeconds: dec.eng.EstimatePrefill(15), ChunkTokens: dec.eng.PrefillChunkTokens()}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("assessment %+v, want %+v", a, want)
	}

	peer := kvtransfer.Peer{ID: "d0", Addr: dec.side.TransferAddr()}
	bps, err := pre.side.LinkThroughput(ctx, peer)
	if err != nil || bps <= 0 {
		t.Fatalf("link: %v, %v", bps, err)
	}
	push, err := pre.side.PrefillAndSend(ctx, &engine.Request{ID: "r1", Prompt: p, MaxTokens: 8}, peer, 10)
	if err != nil {
		t.Fatal(err)
	}
	if st := push.Transfer; st.Blocks != 399/16-10 || st.Bytes != int64(st.Blocks*16*1024) || push.Prefill <= 0 || push.LinkBytesPerSec <= 0 {
		t.Fatalf("push %+v", push)
	}
	if cached := drain(t, dec.eng, &engine.Request{Prompt: p, MaxTokens: 1}); cached != 399/16*16 {
		t.Fatalf("decode worker caches %d tokens after the push, want %d", cached, 399/16*16)
	}

	// A transfer that fails comes back with its code.
	_ = dec.node.Close()
	_, err = pre.side.PrefillAndSend(ctx, &engine.Request{ID: "r2", Prompt: tokens(300), MaxTokens: 1}, peer, 0)
	if code := kvtransfer.CodeOf(err); code != kvtransfer.CodeFailed {
		t.Fatalf("push to a closed node: code %q (%v)", code, err)
	}
}

// TestSideUnimplemented: a worker without a transfer node (aggregated)
// refuses the calls with a clear status instead of hanging or crashing.
func TestSideUnimplemented(t *testing.T) {
	eng, err := mocker.New(mocker.Config{Instant: true})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	c := serve(t, eng)
	s := NewSide(c, SideDesc{ID: "a0", BlockSize: 16})
	_, err = s.Assess(context.Background(), tokens(40), 0)
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "no part in disaggregated prefill") {
		t.Fatalf("assess on an aggregated worker: %v", err)
	}
	if _, err := s.PrefillAndSend(context.Background(), &engine.Request{Prompt: tokens(40)}, kvtransfer.Peer{ID: "d", Addr: "h:1"}, 0); kvtransfer.CodeOf(err) != kvtransfer.CodePrefillFailed {
		t.Fatalf("prefill on an aggregated worker: %v", err)
	}
}

// TestTransferTokenOverTheWire: a frontend's Side fetches the decode
// worker's token key once and mints tokens the worker's node accepts;
// after ResetTransferKey it fetches the key again.
func TestTransferTokenOverTheWire(t *testing.T) {
	ctx := context.Background()
	pre, dec := startWorker(t, "p0", false), startWorker(t, "d0", true)
	dec.node.Close()
	// A decode node that requires tokens, as every worker's does.
	node, err := kvtransfer.NewNode(kvtransfer.Config{ID: "d0", Port: dec.eng, Timeout: 5 * time.Second, RequireToken: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	if err := node.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	local, err := kvtransfer.NewLocal(kvtransfer.Worker{ID: "d0", Engine: dec.eng, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	side := NewSide(serveWith(t, dec.eng, local), SideDesc{ID: "d0", BlockSize: 16, TransferAddr: node.Addr()})
	p := tokens(200)
	full := 199 / 16
	tok, err := side.TransferToken(ctx, "p0", p[:full*16], 0)
	if err != nil {
		t.Fatal(err)
	}
	peer := kvtransfer.Peer{ID: "d0", Addr: node.Addr(), Token: tok}
	if _, err := pre.side.PrefillAndSend(ctx, &engine.Request{ID: "r1", Prompt: p, MaxTokens: 1}, peer, 0); err != nil {
		t.Fatal(err)
	}
	if cached := drain(t, dec.eng, &engine.Request{Prompt: p, MaxTokens: 1}); cached != full*16 {
		t.Fatalf("decode worker caches %d tokens, want %d", cached, full*16)
	}
	// The same token twice is refused.
	if _, err := pre.side.PrefillAndSend(ctx, &engine.Request{ID: "r2", Prompt: p, MaxTokens: 1}, kvtransfer.Peer{ID: "d0", Addr: node.Addr(), Token: tok}, 0); kvtransfer.CodeOf(err) != kvtransfer.CodeRejected {
		t.Fatalf("a replayed token: %v", err)
	}
	side.ResetTransferKey()
	if side.key != nil {
		t.Fatal("the key survived a reset")
	}
	if _, err := side.TransferToken(ctx, "p0", p[:full*16], 0); err != nil || side.key == nil {
		t.Fatalf("the key was not fetched again: %v", err)
	}
	// A worker without a receiving node hands out no key.
	if _, err := pre.side.TransferToken(ctx, "x", p[:16], 0); err == nil {
		t.Fatal("a prefill worker handed out a transfer key")
	}
}
