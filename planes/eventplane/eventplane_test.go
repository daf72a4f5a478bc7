package eventplane

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/planes/kvevents"
)

var quiet = slog.New(slog.DiscardHandler)

func TestSubjects(t *testing.T) {
	cases := []struct{ model, kv, load string }{
		{"tandem-mock", "tandem.kv.tandem-mock", "tandem.load.tandem-mock"},
		{"Qwen/Qwen3-0.6B", "tandem.kv.Qwen_Qwen3-0_6B", "tandem.load.Qwen_Qwen3-0_6B"},
		{"a b*>", "tandem.kv.a_b__", "tandem.load.a_b__"},
		{"", "tandem.kv._", "tandem.load._"},
	}
	for _, c := range cases {
		if got := KVSubject("tandem", c.model); got != c.kv {
			t.Errorf("KVSubject(%q) = %q, want %q", c.model, got, c.kv)
		}
		if got := LoadSubject("tandem", c.model); got != c.load {
			t.Errorf("LoadSubject(%q) = %q, want %q", c.model, got, c.load)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		edit func(*Config)
		ok   bool
	}{
		{func(*Config) {}, true},
		{func(c *Config) { c.Plane = "nats" }, true},
		{func(c *Config) { c.Plane = "nats"; c.NATS = "" }, false},
		{func(c *Config) { c.Plane = "nats"; c.SubjectPrefix = "a.*" }, false},
		{func(c *Config) { c.Plane = "kafka" }, false},
	}
	for i, c := range cases {
		cfg := DefaultConfig()
		c.edit(&cfg)
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("case %d: Validate() = %v, want ok=%v", i, err, c.ok)
		}
	}
}

func batchOf(n int) *kvevents.Batch {
	tokens := make([]int32, 16)
	for i := range tokens {
		tokens[i] = int32(n*16 + i)
	}
	return &kvevents.Batch{TS: float64(n), Events: []kvevents.Event{{
		Type: kvevents.TypeBlockStored, BlockHashes: []kvevents.Hash{kvevents.IntHash(uint64(1000 + n))},
		TokenIDs: tokens, BlockSize: 16, Medium: "GPU",
	}}}
}

// received records what a Source hands over.
type received struct {
	mu     sync.Mutex
	seqs   map[string][]uint64
	hashes []uint64
}

func (r *received) ingest(worker string, seq uint64, b *kvevents.Batch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seqs == nil {
		r.seqs = map[string][]uint64{}
	}
	r.seqs[worker] = append(r.seqs[worker], seq)
	for _, e := range b.Events {
		for _, h := range e.BlockHashes {
			r.hashes = append(r.hashes, h.V)
		}
	}
	return nil
}

func (r *received) count(worker string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seqs[worker])
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// relayWorker is an engine's publisher and its relay.
type relayWorker struct {
	pub   *kvevents.Publisher
	relay *Relay
	board *health.Board
}

func startRelay(t *testing.T, url, worker, model string) *relayWorker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pub, err := kvevents.NewPublisher(ctx, kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	board := health.NewBoard(quiet, nil)
	nc, err := Connect(ctx, url, worker, board, quiet)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRelay(nc, RelayConfig{Worker: worker, Model: model, Prefix: "tandem", Endpoint: pub.Endpoint(),
		ReplayEndpoint: pub.ReplayEndpoint(), Format: kvevents.FormatMap, Board: board, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &relayWorker{pub: pub, relay: r, board: board}
}

// TestRelayToSource: two workers' batches, published on their engines'
// ZMQ sockets before and after the relay joined, reach a router's Source
// complete and in sequence order, each worker on its own sequence, and only
// on the subject of their model; a model followed twice is subscribed once.
func TestRelayToSource(t *testing.T) {
	srv, err := StartServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nc, err := Connect(ctx, srv.URL(), "router", health.NewBoard(quiet, nil), quiet)
	if err != nil {
		t.Fatal(err)
	}
	src := NewSource(nc, "tandem", quiet)
	defer src.Close()
	var got, other received
	if err := src.Follow(ctx, "m1", got.ingest); err != nil {
		t.Fatal(err)
	}
	if err := src.Follow(ctx, "m2", other.ingest); err != nil {
		t.Fatal(err)
	}
	// Following a model again subscribes nothing more: each batch still
	// arrives once, in sequence (checked below).
	if err := src.Follow(ctx, "m1", got.ingest); err != nil {
		t.Fatal(err)
	}
	a := startRelay(t, srv.URL(), "a", "m1")
	b := startRelay(t, srv.URL(), "b", "m1")
	const n = 200
	for i := 0; i < n; i++ {
		for _, w := range []*relayWorker{a, b} {
			if !w.pub.PublishBatch(batchOf(i), kvevents.FormatMap) {
				t.Fatal("publisher queue full")
			}
		}
	}
	waitUntil(t, 10*time.Second, "every batch", func() bool { return got.count("a") == n && got.count("b") == n })
	got.mu.Lock()
	defer got.mu.Unlock()
	for _, w := range []string{"a", "b"} {
		for i, s := range got.seqs[w] {
			if s != uint64(i) {
				t.Fatalf("worker %s: batch %d has seq %d", w, i, s)
			}
		}
	}
	if !slices.Contains(got.hashes, 1000+n-1) {
		t.Fatal("payloads not decoded")
	}
	if other.count("a") != 0 || other.count("b") != 0 {
		t.Fatal("batches delivered to another model's subscription")
	}
	if rel, drop := a.relay.Stats(); rel != n || drop != 0 {
		t.Fatalf("relay stats %d relayed, %d dropped", rel, drop)
	}
}

// TestNATSRestart: the server goes away and comes back on the same
// address; both ends raise event_plane_disconnected meanwhile, clear it
// after, and batches flow again.
func TestNATSRestart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	srv, err := StartServer(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	routerBoard := health.NewBoard(quiet, nil)
	nc, err := Connect(ctx, srv.URL(), "router", routerBoard, quiet)
	if err != nil {
		t.Fatal(err)
	}
	src := NewSource(nc, "tandem", quiet)
	defer src.Close()
	var got received
	if err := src.Follow(ctx, "m", got.ingest); err != nil {
		t.Fatal(err)
	}
	w := startRelay(t, srv.URL(), "w", "m")
	// The relay's ZMQ subscription may not be joined yet (ZMQ drops what a
	// PUB socket sends before that, and a lone batch leaves no gap to
	// replay): publish until one arrives.
	seq := 0
	waitUntil(t, 10*time.Second, "first batch", func() bool {
		if got.count("w") > 0 {
			return true
		}
		w.pub.PublishBatch(batchOf(seq), kvevents.FormatMap)
		seq++
		return false
	})
	before := got.count("w")

	srv.Shutdown()
	for _, b := range []*health.Board{routerBoard, w.board} {
		waitUntil(t, 10*time.Second, "disconnection raised", func() bool { return b.IsActive(DiagDisconnected, "nats") })
	}
	if srv, err = StartServer(addr); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	for _, b := range []*health.Board{routerBoard, w.board} {
		waitUntil(t, 10*time.Second, "disconnection cleared", func() bool { return !b.IsActive(DiagDisconnected, "nats") })
	}
	// NATS forgets subscriptions with the server; the client restores
	// them on reconnect, so new batches arrive without re-following.
	deadline := time.Now().Add(10 * time.Second)
	for i := seq; got.count("w") <= before; i++ {
		w.pub.PublishBatch(batchOf(i), kvevents.FormatMap)
		if time.Now().After(deadline) {
			t.Fatal("no batch after the restart")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
