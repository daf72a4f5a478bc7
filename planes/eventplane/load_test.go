package eventplane

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/router"
)

// recorder is a load-only policy that observes, recording the calls.
type recorder struct {
	router.LeastLoaded
	mu    sync.Mutex
	calls []string
	toks  map[string]*router.Request
}

// The recorder indexes prompts by blocks of 2, its hash the pair's sum.
func (r *recorder) BlockSize() int { return 2 }
func (r *recorder) PromptHashes(tokens []engine.Token) []uint64 {
	var hs []uint64
	for i := 0; i+2 <= len(tokens); i += 2 {
		hs = append(hs, uint64(tokens[i]+tokens[i+1]))
	}
	return hs
}

func (r *recorder) note(s string) {
	r.mu.Lock()
	r.calls = append(r.calls, s)
	r.mu.Unlock()
}
func (r *recorder) Routed(req *router.Request, d router.Decision) {
	r.mu.Lock()
	if r.toks == nil {
		r.toks = map[string]*router.Request{}
	}
	r.toks[req.ID] = req
	r.mu.Unlock()
	r.note("routed " + req.ID + " " + d.WorkerID)
}
func (r *recorder) FirstToken(req *router.Request, w string, _ int) {
	r.note("first " + req.ID + " " + w)
}
func (r *recorder) Finished(req *router.Request, w string) { r.note("finished " + req.ID + " " + w) }
func (r *recorder) WorkerRemoved(w string)                 { r.note("removed " + w) }

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// TestLoadShare: a request routed by replica A reaches replica B's policy
// as Routed, FirstToken and Finished, with its length and block hashes
// (never its tokens), and counts as load
// in B's picks while it runs.
func TestLoadShare(t *testing.T) {
	srv, err := StartServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(id string) (*router.LoadShare, *recorder) {
		nc, err := Connect(ctx, srv.URL(), id, health.NewBoard(quiet, nil), quiet)
		if err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		s := router.NewLoadShare(rec, NewLoadBus(nc, "tandem"), id, quiet)
		if err := s.Follow(ctx, "m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		_ = nc.Flush() // the subscription is registered before anyone publishes
		return s, rec
	}
	a, recA := open("router-a")
	b, recB := open("router-b")

	req := &router.Request{ID: "r1", Model: "m", Tokens: []engine.Token{5, 6, 7}}
	a.Routed(req, router.Decision{WorkerID: "w2"})
	waitUntil(t, 5*time.Second, "B sees the request", func() bool { return b.PeerRequests() == 1 })
	d, err := b.Pick(&router.Request{Model: "m"}, []router.Candidate{{ID: "w1"}, {ID: "w2"}})
	if err != nil {
		t.Fatal(err)
	}
	if d.WorkerID != "w1" {
		t.Fatalf("B picked %s, the worker A just loaded", d.WorkerID)
	}
	a.FirstToken(req, "w2", 0)
	a.Finished(req, "w2")
	want := []string{"routed router-a/r1 w2", "first router-a/r1 w2", "finished router-a/r1 w2"}
	waitUntil(t, 5*time.Second, "B replays the lifecycle", func() bool { return len(recB.snapshot()) == 3 })
	if got := recB.snapshot(); !slices.Equal(got, want) {
		t.Fatalf("B's policy saw %v, want %v", got, want)
	}
	// B knows the prompt by its length and block hashes, never its tokens.
	if got := recB.toks["router-a/r1"]; got.Tokens != nil || got.Remote == nil || got.Remote.Len != 3 || got.Remote.BlockSize != 2 ||
		!slices.Equal(got.Remote.Hashes, []uint64{11}) {
		t.Fatalf("B's request %+v (remote %+v)", got, got.Remote)
	}
	if b.PeerRequests() != 0 {
		t.Fatal("finished request still counted")
	}
	// A's own policy saw its own calls once, never echoed back.
	time.Sleep(50 * time.Millisecond)
	if got := recA.snapshot(); len(got) != 3 {
		t.Fatalf("A's policy saw %v", got)
	}

	// A peer's request on a worker that leaves is forgotten with it.
	a.Routed(&router.Request{ID: "r2", Model: "m", Tokens: []engine.Token{1}}, router.Decision{WorkerID: "w1"})
	waitUntil(t, 5*time.Second, "r2", func() bool { return b.PeerRequests() == 1 })
	b.WorkerRemoved("w1")
	if b.PeerRequests() != 0 {
		t.Fatal("request on a removed worker still counted")
	}
}
