package disagg

import (
	"context"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/engine/native"
	"github.com/tandemllm/tandem/engine/routed"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/sharedfiles"
	"github.com/tandemllm/tandem/planes/kvtransfer"
)

// busy reports a fixed number of running decodes, to price interference
// without running them.
type busy struct {
	*mocker.Engine
	n int
}

func (b busy) RunningDecodes() int { return b.n }

func newMocker(t testing.TB, bpt int) *mocker.Engine {
	t.Helper()
	e, err := mocker.New(mocker.Config{KVBytesPerToken: bpt, Speedup: 100, KVCapacityTokens: 32 * 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func node(t testing.TB, id string, e engine.Engine, listen bool) *kvtransfer.Node {
	t.Helper()
	n, err := kvtransfer.NewNode(kvtransfer.Config{ID: id, Port: e.(engine.KVPort), Timeout: 5 * time.Second, ProbeBytes: 64 << 10})
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

func local(t testing.TB, w kvtransfer.Worker) *kvtransfer.Local {
	t.Helper()
	l, err := kvtransfer.NewLocal(w)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func prompt(n, salt int) []engine.Token {
	p := make([]engine.Token, n)
	for i := range p {
		p[i] = engine.Token((i*13 + salt) % 500)
	}
	return p
}

func collect(t testing.TB, g engine.Generator, req *engine.Request) ([]engine.Token, int) {
	t.Helper()
	st, err := g.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var out []engine.Token
	cached := 0
	for {
		d, err := st.Recv()
		if err == io.EOF {
			return out, cached
		}
		if err != nil {
			t.Fatal(err)
		}
		if d.CachedTokens > 0 {
			cached = d.CachedTokens
		}
		out = append(out, d.Tokens...)
	}
}

type setup struct {
	orch    *Orchestrator
	dec     engine.Engine
	gen     engine.Generator
	pre     *mocker.Engine
	preNode *kvtransfer.Node
	decNode *kvtransfer.Node
	board   *health.Board
	mu      sync.Mutex
	seen    []Decision
}

func newSetup(t *testing.T, mode Mode, running int, preBytes int, link float64) *setup {
	s := &setup{board: health.NewBoard(slog.New(slog.DiscardHandler), nil)}
	dm := newMocker(t, 4096)
	s.dec = busy{dm, running}
	s.pre = newMocker(t, preBytes)
	s.preNode = node(t, "p0", s.pre, false)
	s.decNode = node(t, "d0", dm, true)
	s.orch = New(Config{Mode: mode, Board: s.board, Logger: slog.New(slog.DiscardHandler), OnDecision: func(d Decision) {
		s.mu.Lock()
		s.seen = append(s.seen, d)
		s.mu.Unlock()
	}})
	s.orch.AddPrefill(local(t, kvtransfer.Worker{ID: "p0", Engine: s.pre, Node: s.preNode}))
	if link > 0 {
		s.preNode.SetThroughput(kvtransfer.Peer{ID: "d0", Addr: s.decNode.Addr()}, link)
	}
	s.gen = s.orch.Wrap(local(t, kvtransfer.Worker{ID: "d0", Engine: s.dec, Node: s.decNode}), s.dec)
	return s
}

func (s *setup) last(t *testing.T) Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seen) == 0 {
		t.Fatal("no decision recorded")
	}
	return s.seen[len(s.seen)-1]
}

func TestDecide(t *testing.T) {
	const fast, slow = 10e9, 125e6 // bytes/s: a local copy, 1 Gbit/s
	tests := []struct {
		name       string
		mode       Mode
		running    int
		preBytes   int
		link       float64
		decHas     int // tokens the decode worker caches first
		tokens     int
		wantChoice string
		wantReason string
	}{
		{"cached on the decode worker", Auto, 0, 4096, fast, 2048, 2000, ChoiceLocal, ReasonNothingToMove},
		{"idle decode worker, slow link", Auto, 0, 4096, slow, 0, 2000, ChoiceLocal, ReasonLocalCheaper},
		{"busy decode worker, fast link", Auto, 16, 4096, fast, 0, 2000, ChoiceRemote, ReasonRemoteCheaper},
		{"busy decode worker, slow link", Auto, 16, 4096, 1e6, 0, 2000, ChoiceLocal, ReasonLocalCheaper},
		{"always", Always, 0, 4096, slow, 0, 2000, ChoiceRemote, ReasonModeAlways},
		{"layouts differ", Always, 0, 2048, fast, 0, 2000, ChoiceLocal, ReasonLayoutMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t, tc.mode, tc.running, tc.preBytes, tc.link)
			p := prompt(tc.tokens, 1)
			if tc.decHas > 0 {
				collect(t, s.dec, &engine.Request{Prompt: prompt(tc.decHas, 1), MaxTokens: 1})
			}
			collect(t, s.gen, &engine.Request{Prompt: p, MaxTokens: 2, IgnoreEOS: true})
			d := s.last(t)
			if d.Choice != tc.wantChoice || d.Reason != tc.wantReason {
				t.Fatalf("decision %s/%s, want %s/%s (%+v)", d.Choice, d.Reason, tc.wantChoice, tc.wantReason, d)
			}
			if tc.wantReason == ReasonLayoutMismatch && !s.board.IsActive(kvtransfer.CodeLayoutMismatch, "d0") {
				t.Fatal("kv_layout_mismatch not raised")
			}
			if d.Choice == ChoiceRemote && d.Fallback != "" {
				t.Fatalf("remote prefill fell back: %s", d.Fallback)
			}
		})
	}
}

func TestRemotePrefillMovesOnlyMissingBlocks(t *testing.T) {
	s := newSetup(t, Always, 0, 4096, 0)
	p := prompt(1601, 3)
	// The decode worker already holds the first 1,024 tokens.
	collect(t, s.dec, &engine.Request{Prompt: p[:1025], MaxTokens: 1})
	// Aggregated reference: a separate engine with the decode worker's seed.
	ref := newMocker(t, 4096)
	want, _ := collect(t, ref, &engine.Request{Prompt: p, MaxTokens: 8, IgnoreEOS: true})
	got, cached := collect(t, s.gen, &engine.Request{Prompt: p, MaxTokens: 8, IgnoreEOS: true})
	d := s.last(t)
	if d.Choice != ChoiceRemote || d.Fallback != "" {
		t.Fatalf("decision %+v", d)
	}
	if wantBytes := int64((1600/16 - 1024/16) * 16 * 4096); d.TransferBytes != wantBytes {
		t.Fatalf("moved %d bytes, want %d (only the missing blocks)", d.TransferBytes, wantBytes)
	}
	if cached != 1600 {
		t.Fatalf("decode worker reports %d cached tokens, want 1600", cached)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("disaggregated output %v differs from aggregated %v", got, want)
	}
}

func TestFailedTransferFallsBack(t *testing.T) {
	s := newSetup(t, Always, 0, 4096, 1e9)
	_ = s.decNode.Close() // the decode worker's transfer plane is gone
	p := prompt(800, 4)
	got, _ := collect(t, s.gen, &engine.Request{Prompt: p, MaxTokens: 4, IgnoreEOS: true})
	if len(got) != 4 {
		t.Fatalf("request did not complete: %v", got)
	}
	d := s.last(t)
	if d.Fallback != kvtransfer.CodeFailed {
		t.Fatalf("fallback code %q, want %s", d.Fallback, kvtransfer.CodeFailed)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ok   bool
		mode Mode
	}{{"auto", true, Auto}, {"", true, Auto}, {"always", true, Always}, {"never", true, Never}, {"sometimes", false, ""}} {
		m, err := ParseMode(tc.in)
		if (err == nil) != tc.ok || m != tc.mode {
			t.Errorf("ParseMode(%q) = %q, %v", tc.in, m, err)
		}
	}
}

// TestNativeBitExact: a request served disaggregated (prefill on one
// native engine, KV over TCP, decode on another) produces exactly the
// tokens of one aggregated engine.
func TestNativeBitExact(t *testing.T) {
	dir, err := sharedfiles.Path("models", "stories260K")
	if err != nil {
		t.Skipf("shared directory absent: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("reference model stories260K absent: %v", err)
	}
	load := func() *native.Engine {
		e, _, err := native.Load(dir, native.Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e
	}
	agg, pre, dec := load(), load(), load()
	o := New(Config{Mode: Always, Logger: slog.New(slog.DiscardHandler)})
	var d Decision
	o.cfg.OnDecision = func(x Decision) { d = x }
	o.AddPrefill(local(t, kvtransfer.Worker{ID: "p0", Engine: pre, Node: node(t, "p0", pre, false)}))
	gen := o.Wrap(local(t, kvtransfer.Worker{ID: "d0", Engine: dec, Node: node(t, "d0", dec, true)}), dec)
	p := prompt(150, 5)
	for i := range p {
		p[i] = p[i]%400 + 3
	}
	req := engine.Request{Prompt: p, MaxTokens: 24, IgnoreEOS: true, Sampling: engine.Sampling{Temperature: 0}}
	want, _ := collect(t, agg, &req)
	got, cached := collect(t, gen, &req)
	if d.Choice != ChoiceRemote || d.Fallback != "" || d.TransferBytes == 0 {
		t.Fatalf("not served disaggregated: %+v", d)
	}
	if cached < 144 {
		t.Fatalf("decode engine reused %d tokens, want the 144 transferred", cached)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("disaggregated %v\n  aggregated %v", got, want)
	}
}

func TestRemoteCost(t *testing.T) {
	for _, tc := range []struct {
		name          string
		prefill, xfer float64
		chunks        int
		want          float64
	}{
		{"one chunk: prefill then transfer", 0.08, 0.10, 1, 0.18},
		{"link slower: one chunk of prefill, then the link paces", 0.08, 0.40, 8, 0.01 + 0.40},
		{"prefill slower: the link adds its last chunk", 0.40, 0.08, 8, 0.40 + 0.01},
		{"balanced", 0.2, 0.2, 4, 0.25},
	} {
		if got := remoteCost(tc.prefill, tc.xfer, tc.chunks); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: remoteCost(%v, %v, %d) = %v, want %v", tc.name, tc.prefill, tc.xfer, tc.chunks, got, tc.want)
		}
	}
}

// TestChunkedPrefillStreams: with a prefill engine that commits blocks
// chunk by chunk, the decider prices the pipeline in chunks, and the leg,
// streamed while the prefill runs, delivers every block (that it overlaps
// is kvtransfer's TestSendWhile).
func TestChunkedPrefillStreams(t *testing.T) {
	dm := newMocker(t, 4096)
	pre, err := mocker.New(mocker.Config{KVBytesPerToken: 4096, Speedup: 10, KVCapacityTokens: 32 * 1024, MaxNumBatchedTokens: 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pre.Close() })
	var d Decision
	o := New(Config{Mode: Always, Logger: slog.New(slog.DiscardHandler), OnDecision: func(x Decision) { d = x }})
	o.AddPrefill(local(t, kvtransfer.Worker{ID: "p0", Engine: pre, Node: node(t, "p0", pre, false)}))
	gen := o.Wrap(local(t, kvtransfer.Worker{ID: "d0", Engine: dm, Node: node(t, "d0", dm, true)}), dm)
	_, cached := collect(t, gen, &engine.Request{Prompt: prompt(2049, 9), MaxTokens: 2, IgnoreEOS: true})
	if d.Choice != ChoiceRemote || d.Fallback != "" || d.PrefillChunks != 9 {
		t.Fatalf("decision %+v, want remote in 9 chunks", d)
	}
	if cached != 2048 {
		t.Fatalf("decode worker reused %d tokens, want 2048", cached)
	}
}

// TestLinksProbedInBackground: wrapping a decode worker probes every
// prefill worker's link to it, and a prefill worker added later probes
// its links to the decode workers already wrapped; requests then find the
// links measured.
func TestLinksProbedInBackground(t *testing.T) {
	dm, pm, pm2 := newMocker(t, 4096), newMocker(t, 4096), newMocker(t, 4096)
	o := New(Config{Mode: Auto, Logger: slog.New(slog.DiscardHandler)})
	defer o.Close()
	pn, dn, pn2 := node(t, "p0", pm, false), node(t, "d0", dm, true), node(t, "p1", pm2, false)
	o.AddPrefill(local(t, kvtransfer.Worker{ID: "p0", Engine: pm, Node: pn}))
	o.Wrap(local(t, kvtransfer.Worker{ID: "d0", Engine: dm, Node: dn}), dm)
	o.AddPrefill(local(t, kvtransfer.Worker{ID: "p1", Engine: pm2, Node: pn2}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := o.Probed(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*kvtransfer.Node{pn, pn2} {
		if _, ok := n.Estimate(kvtransfer.Peer{ID: "d0", Addr: dn.Addr()}); !ok {
			t.Fatalf("%s's link to d0 was not probed", n.ID())
		}
	}
}

// stuck is a prefill worker whose legs never finish (a hung process): it
// answers everything else as the real one does.
type stuck struct{ *kvtransfer.Local }

func (s stuck) PrefillAndSend(ctx context.Context, _ *engine.Request, _ kvtransfer.Peer, _ int) (kvtransfer.Push, error) {
	<-ctx.Done()
	return kvtransfer.Push{}, ctx.Err()
}

// TestStuckPrefillTimesOut: a leg that outlives LegTimeout falls back to
// local prefill with its own code; the request completes.
func TestStuckPrefillTimesOut(t *testing.T) {
	dm, pm := newMocker(t, 4096), newMocker(t, 4096)
	var d Decision
	o := New(Config{Mode: Always, LegTimeout: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), OnDecision: func(x Decision) { d = x }})
	defer o.Close()
	o.AddPrefill(stuck{local(t, kvtransfer.Worker{ID: "p0", Engine: pm, Node: node(t, "p0", pm, false)})})
	gen := o.Wrap(local(t, kvtransfer.Worker{ID: "d0", Engine: dm, Node: node(t, "d0", dm, true)}), dm)
	got, _ := collect(t, gen, &engine.Request{Prompt: prompt(400, 2), MaxTokens: 3, IgnoreEOS: true})
	if len(got) != 3 || d.Choice != ChoiceRemote || d.Fallback != FallbackPrefillTimeout {
		t.Fatalf("tokens %v, decision %+v", got, d)
	}
}

// counting is a Side that counts Assess calls (a round trip each across
// processes).
type counting struct {
	*kvtransfer.Local
	n *atomic.Int64
}

func (c counting) Assess(ctx context.Context, p []engine.Token, tail int) (kvtransfer.Assessment, error) {
	c.n.Add(1)
	return c.Local.Assess(ctx, p, tail)
}

// TestPredictedHitAsksNobody: when the KV router predicts the decode
// worker holds every whole block, auto mode decides locally without
// assessing anyone; a partial prediction, or always mode, still asks.
func TestPredictedHitAsksNobody(t *testing.T) {
	p := prompt(161, 7) // 10 whole blocks before the last token
	for _, tc := range []struct {
		name      string
		mode      Mode
		predicted int
		wantAsks  bool
	}{
		{"whole prompt predicted", Auto, 160, false},
		{"part predicted", Auto, 144, true},
		{"always", Always, 160, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dm, pm := newMocker(t, 4096), newMocker(t, 4096)
			var asks atomic.Int64
			var d Decision
			o := New(Config{Mode: tc.mode, Logger: slog.New(slog.DiscardHandler), OnDecision: func(x Decision) { d = x }})
			defer o.Close()
			o.AddPrefill(counting{local(t, kvtransfer.Worker{ID: "p0", Engine: pm, Node: node(t, "p0", pm, false)}), &asks})
			gen := o.Wrap(counting{local(t, kvtransfer.Worker{ID: "d0", Engine: dm, Node: node(t, "d0", dm, true)}), &asks}, dm)
			st, err := routed.Generate(context.Background(), gen, routed.Request{Req: &engine.Request{Prompt: p, MaxTokens: 1}, PredictedCachedTokens: tc.predicted})
			if err != nil {
				t.Fatal(err)
			}
			for {
				if _, err := st.Recv(); err != nil {
					break
				}
			}
			if (asks.Load() > 0) != tc.wantAsks || d.Predicted == tc.wantAsks {
				t.Fatalf("%d assessments, decision %+v", asks.Load(), d)
			}
		})
	}
}
