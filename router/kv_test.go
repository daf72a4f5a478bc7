package router

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/planes/kvevents"
	"github.com/tandemllm/tandem/planes/kvevents/follow"
)

const tbs = 4 // test block size

// syncBuffer is a log sink safe for the timers' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type kvFixture struct {
	kv    *KV
	r     *Router
	board *health.Board
	logs  *syncBuffer
	reg   *prometheus.Registry
	fol   *follow.Follower // nil in kv-approx
}

// newKVFixture builds a kv (or kv-approx) policy behind a Router with
// in-process workers (no ZMQ) named w0..w{n-1}.
func newKVFixture(t *testing.T, approx bool, n int, mod func(*KVConfig)) *kvFixture {
	t.Helper()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	reg := prometheus.NewRegistry()
	board := health.NewBoard(log, reg)
	cfg := KVConfig{BlockSize: tbs, Board: board, Logger: log, Registerer: reg, Seed: 1, KVEventsTimeout: 100 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	newPolicy := NewKV
	var fol *follow.Follower
	if approx {
		newPolicy = NewKVApprox
	} else {
		var err error
		fol, err = follow.New(t.Context(), follow.Config{Topic: cfg.Topic, Bind: cfg.Bind, BindAllow: cfg.BindAllow,
			ReplayTimeout: cfg.ReplayTimeout, DialTimeout: cfg.DialTimeout, Logger: log, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Streams = fol
	}
	kv, err := newPolicy(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kv.Close)
	r := New(kv, nil)
	for i := range n {
		id := fmt.Sprint("w", i)
		r.AddWorker(Worker{ID: id, Model: "m"})
		if err := kv.AddWorker(id, "", "", 0); err != nil {
			t.Fatal(err)
		}
	}
	return &kvFixture{kv: kv, r: r, board: board, logs: logs, reg: reg, fol: fol}
}

func prompt(p, blocks int) []engine.Token {
	t := make([]engine.Token, blocks*tbs)
	for i := range t {
		t[i] = engine.Token(p*1000 + i)
	}
	return t
}

// stored is a BlockStored of tokens' full blocks with engine hashes base+i.
func storedEvent(tokens []engine.Token, base uint64) kvevents.Event {
	ev := kvevents.Event{Type: kvevents.TypeBlockStored, BlockSize: tbs, TokenIDs: tokens[:len(tokens)/tbs*tbs]}
	for i := range len(tokens) / tbs {
		ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(base+uint64(i)))
	}
	return ev
}

func (f *kvFixture) ingest(t *testing.T, worker string, seq uint64, evs ...kvevents.Event) {
	t.Helper()
	if err := f.kv.Ingest(worker, seq, &kvevents.Batch{Events: evs}); err != nil {
		t.Fatal(err)
	}
}

// route runs one request through the Router: routed, first token with the
// given cached tokens, done.
func (f *kvFixture) route(t *testing.T, toks []engine.Token, cached func(worker string) int) Decision {
	t.Helper()
	rt, err := f.r.Route(&Request{Model: "m", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	c := 0
	if cached != nil {
		c = cached(rt.Worker.ID)
	}
	rt.FirstToken(c)
	rt.Done()
	return rt.Decision
}

func TestDynamoLogitWorkedExample(t *testing.T) {
	// Dynamo's KV router guide's worked example (w=1; github.com/ai-dynamo/dynamo): the logits are prefill + decode
	// blocks, W2 wins with 10. Block size 16: prefill blocks = tokens/16.
	tests := []struct {
		name                                    string
		isl, overlap, activePrefill, activeUniq int
		newBlocks                               int
		want                                    float64
	}{
		{"W1 8+10", 8 * 16, 0, 0, 0, 10, 18},
		{"W2 5+5", 10 * 16, 5, 0, 2, 3, 10},
		{"W3 2+9", 2 * 16, 0, 0, 9, 0, 11},
		{"prefill clamps at zero", 32, 4, 0, 0, 2, 2},
		{"unrounded prefill blocks", 20, 0, 4, 0, 2, 3.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := dynamoLogit(1, 16, tc.isl, tc.overlap, tc.activePrefill, tc.activeUniq, tc.newBlocks); got != tc.want {
				t.Fatalf("logit = %v, want %v", got, tc.want)
			}
		})
	}
	if got := dynamoLogit(2, 16, 64, 1, 0, 0, 4); got != 2*3+4 {
		t.Fatalf("weight 2: %v", got)
	}
}

func TestKVRoutesToTheCache(t *testing.T) {
	for _, cost := range []CostModel{CostTandem, CostDynamo} {
		t.Run(string(cost), func(t *testing.T) {
			f := newKVFixture(t, false, 3, func(c *KVConfig) { c.Cost = cost })
			a, b := prompt(1, 8), prompt(2, 8)
			f.ingest(t, "w2", 0, storedEvent(a, 100))
			f.ingest(t, "w1", 0, storedEvent(b[:5*tbs], 200))
			tests := []struct {
				toks      []engine.Token
				worker    string
				predicted int
			}{
				{append(a, 7, 7), "w2", 8 * tbs},
				{a, "w2", 7 * tbs}, // the last token is always recomputed
				{b, "w1", 5 * tbs},
			}
			for _, tc := range tests {
				d := f.route(t, tc.toks, nil)
				if d.WorkerID != tc.worker || d.PredictedCachedTokens != tc.predicted {
					t.Fatalf("got %+v, want %s with %d", d, tc.worker, tc.predicted)
				}
			}
		})
	}
}

func TestKVTiesSpreadNewPrefixes(t *testing.T) {
	// Sequential new prefixes all tie on cost; both models must alternate
	// by footprint (Dynamo's tree size) so the working sets stay balanced.
	for _, cost := range []CostModel{CostTandem, CostDynamo} {
		t.Run(string(cost), func(t *testing.T) {
			f := newKVFixture(t, true, 2, func(c *KVConfig) { c.Cost = cost })
			count := map[string]int{}
			for p := range 12 {
				count[f.route(t, prompt(p, 10), nil).WorkerID]++
			}
			if count["w0"] != 6 || count["w1"] != 6 {
				t.Fatalf("placement %v", count)
			}
		})
	}
}

func TestKVApproxRemembersAndExpires(t *testing.T) {
	now := time.Unix(100, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f := newKVFixture(t, true, 4, func(c *KVConfig) { c.ApproxTTL = 10 * time.Second; c.Now = clock })
	p := prompt(1, 6)
	first := f.route(t, p, nil)
	for range 5 {
		if d := f.route(t, p, nil); d.WorkerID != first.WorkerID || d.PredictedCachedTokens != 5*tbs {
			t.Fatalf("re-request went to %+v, first to %s", d, first.WorkerID)
		}
	}
	mu.Lock()
	now = now.Add(11 * time.Second)
	mu.Unlock()
	if d := f.route(t, p, nil); d.PredictedCachedTokens != 0 {
		t.Fatalf("after TTL: %+v", d)
	}
	if h := f.kv.Health(); h[first.WorkerID] != "approx" {
		t.Fatalf("health %v", h)
	}
}

func TestKVLoadAccountingReturnsToZero(t *testing.T) {
	f := newKVFixture(t, false, 3, nil)
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt, err := f.r.Route(&Request{Model: "m", Tokens: prompt(i%7, 1+i%5)})
			if err != nil {
				t.Error(err)
				return
			}
			if i%3 != 0 {
				rt.FirstToken(0)
			}
			rt.Done()
		}()
		if i == 150 {
			f.kv.RemoveWorker("w2") // the router keeps it; the policy re-creates it
		}
	}
	wg.Wait()
	if _, reqs, prefill := f.kv.active.totals(); reqs != 0 || prefill != 0 {
		t.Fatalf("in flight after all done: %d requests, %d prefill tokens", reqs, prefill)
	}
	if blocks, _, _ := f.kv.active.totals(); blocks != 0 {
		t.Fatalf("%d active blocks left", blocks)
	}
	f.kv.mu.Lock()
	defer f.kv.mu.Unlock()
	if len(f.kv.flights) != 0 {
		t.Fatalf("%d flights left", len(f.kv.flights))
	}
}

func TestKVPinnedBlocksCountBeforeEvents(t *testing.T) {
	// A request past its first token pins its prefix in the engine even if
	// the BlockStored has not arrived. The tandem cost sends a same-prefix
	// request there; Dynamo's (index only) cannot see it.
	for _, tc := range []struct {
		cost CostModel
		same bool
	}{{CostTandem, true}, {CostDynamo, false}} {
		t.Run(string(tc.cost), func(t *testing.T) {
			f := newKVFixture(t, false, 2, func(c *KVConfig) { c.Cost = tc.cost; c.OverlapWeight = 2 })
			p := prompt(1, 16)
			rt, err := f.r.Route(&Request{Model: "m", Tokens: p})
			if err != nil {
				t.Fatal(err)
			}
			rt.FirstToken(0)
			defer rt.Done()
			// The worker must not be "missing": its events are merely late.
			f.ingest(t, rt.Worker.ID, 0, storedEvent(prompt(9, 1), 900))
			rt2, err := f.r.Route(&Request{Model: "m", Tokens: append(p, 1, 2, 3, 4)})
			if err != nil {
				t.Fatal(err)
			}
			defer rt2.Done()
			if got := rt2.Worker.ID == rt.Worker.ID; got != tc.same {
				t.Fatalf("second request on %s, first on %s", rt2.Worker.ID, rt.Worker.ID)
			}
		})
	}
}

func TestKVEventsMissingDiagnostic(t *testing.T) {
	for _, mode := range []OnMissing{MissingFallback, MissingFail} {
		t.Run(string(mode), func(t *testing.T) {
			f := newKVFixture(t, false, 2, func(c *KVConfig) { c.OnMissing = mode })
			// w0 publishes; w1 never does.
			f.ingest(t, "w0", 0, storedEvent(prompt(99, 2), 1))
			var routedTo []string
			for p := 0; p < 4; p++ {
				d := f.route(t, prompt(p, 4), func(string) int { return 0 })
				routedTo = append(routedTo, d.WorkerID)
				if d.WorkerID == "w0" {
					f.ingest(t, "w0", uint64(p+1), storedEvent(prompt(p, 4), uint64(100*p+100)))
				}
			}
			deadline := time.Now().Add(3 * time.Second)
			for !f.board.IsActive(DiagKVEventsMissing, "w1") || !strings.Contains(f.logs.String(), "diagnostic_code=kv_events_missing") {
				if time.Now().After(deadline) {
					t.Fatalf("no diagnostic; routed to %v; logs:\n%s", routedTo, f.logs)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if f.board.IsActive(DiagKVEventsMissing, "w0") {
				t.Fatal("w0 flagged although it publishes")
			}
			if !strings.Contains(f.logs.String(), "level=ERROR") || !strings.Contains(f.logs.String(), "diagnostic_code=kv_events_missing") {
				t.Fatalf("no ERROR line:\n%s", f.logs)
			}
			if got := testutil.ToFloat64(f.kv.met.health.WithLabelValues("w1", "missing")); got != 1 {
				t.Fatalf("health metric = %v", got)
			}
			if mode == MissingFail {
				for range 4 {
					if d := f.route(t, prompt(50, 4), nil); d.WorkerID != "w0" {
						t.Fatalf("routed to missing worker %s", d.WorkerID)
					}
				}
				f.r.RemoveWorker("w0")
				if _, err := f.r.Route(&Request{Model: "m", Tokens: prompt(1, 4)}); !errors.Is(err, ErrKVEventsMissing) {
					t.Fatalf("err = %v", err)
				}
				return
			}
			// Events flow again: recovered.
			f.ingest(t, "w1", 0, storedEvent(prompt(7, 2), 7))
			if f.board.IsActive(DiagKVEventsMissing, "w1") || !strings.Contains(f.logs.String(), "diagnostic_code=kv_events_recovered") {
				t.Fatalf("not recovered:\n%s", f.logs)
			}
			if h := f.kv.Health()["w1"]; h != "healthy" {
				t.Fatalf("w1 is %s", h)
			}
		})
	}
}

func TestKVMissingNotRaisedForCachedRequests(t *testing.T) {
	// A request the engine served from cache stores nothing: silence is
	// then expected, not a fault. A block-aligned prompt held whole is
	// reported one block short (the engine recomputes the last token),
	// and that recomputed block is not new either. A block the worker did
	// not hold is: its BlockStored is due.
	p := prompt(1, 4)
	tests := []struct {
		name    string
		held    []engine.Token // what the worker published
		cached  int            // what the engine reports
		missing bool
	}{
		{"whole prompt reported", p, len(p), false},
		{"full hit capped at isl-1", p, len(p) - tbs, false},
		{"last block new", p[:3*tbs], len(p) - tbs, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newKVFixture(t, false, 1, nil)
			f.ingest(t, "w0", 0, storedEvent(tc.held, 1))
			time.Sleep(150 * time.Millisecond) // older than the timeout
			for range 3 {
				f.route(t, p, func(string) int { return tc.cached })
			}
			time.Sleep(250 * time.Millisecond)
			if got := f.board.IsActive(DiagKVEventsMissing, "w0"); got != tc.missing {
				t.Fatalf("kv_events_missing active = %v, want %v", got, tc.missing)
			}
		})
	}
}

func TestKVLossRebuilds(t *testing.T) {
	f := newKVFixture(t, false, 2, func(c *KVConfig) { c.RebuildWindow = 200 * time.Millisecond })
	p := prompt(1, 6)
	f.ingest(t, "w1", 0, storedEvent(p, 10))
	full := func(string) int { return len(p) } // engine hits: no BlockStored expected
	if d := f.route(t, p, full); d.WorkerID != "w1" {
		t.Fatalf("before loss: %+v", d)
	}
	f.ingest(t, "w1", 5, storedEvent(prompt(2, 1), 50)) // seqs 1..4 lost
	if !f.board.IsActive(DiagKVEventsLost, "w1") || f.kv.Health()["w1"] != "rebuilding" {
		t.Fatalf("no loss diagnostic: %v %v", f.board.Active(), f.kv.Health())
	}
	// The index was cleared, but the approximate record of the request
	// routed above still points to w1.
	if d := f.route(t, p, full); d.WorkerID != "w1" {
		t.Fatalf("during rebuild: %+v", d)
	}
	deadline := time.Now().Add(3 * time.Second)
	for f.board.IsActive(DiagKVEventsLost, "w1") || !strings.Contains(f.logs.String(), "diagnostic_code=kv_events_rebuilt") {
		if time.Now().After(deadline) {
			t.Fatalf("never rebuilt:\n%s", f.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if h := f.kv.Health()["w1"]; h != "healthy" || !strings.Contains(f.logs.String(), "diagnostic_code=kv_events_rebuilt") {
		t.Fatalf("after rebuild: %s\n%s", h, f.logs)
	}
}

func TestKVBlockSizeMismatchRefused(t *testing.T) {
	f := newKVFixture(t, false, 1, nil)
	f.r.AddWorker(Worker{ID: "odd", Model: "m"})
	err := f.kv.AddWorker("odd", "tcp://127.0.0.1:1", "", 6) // router block 4
	if err == nil || !f.board.IsActive(DiagKVBlockSize, "odd") || f.kv.Health()["odd"] != "refused" {
		t.Fatalf("err %v, board %v, health %v", err, f.board.Active(), f.kv.Health())
	}
	// An engine block of 8 is two router blocks: accepted and converted.
	if err := f.kv.AddWorker("ok", "", "", 8); err != nil {
		t.Fatal(err)
	}
	f.r.AddWorker(Worker{ID: "ok", Model: "m"})
	p := prompt(3, 8)
	ev := storedEvent(p, 1)
	ev.BlockSize, ev.BlockHashes = 8, ev.BlockHashes[:4]
	f.ingest(t, "ok", 0, ev)
	if d := f.route(t, p, nil); d.WorkerID != "ok" || d.PredictedCachedTokens != 7*tbs {
		t.Fatalf("converted worker: %+v", d)
	}
}

func TestKVStreamStatesBeforeLive(t *testing.T) {
	// A worker whose subscription is not up yet is routed by approximation:
	// the first request for a prefix is remembered, so the second follows it.
	f := newKVFixture(t, false, 0, nil)
	for _, id := range []string{"a", "b"} {
		f.r.AddWorker(Worker{ID: id, Model: "m"})
		if err := f.kv.AddWorker(id, "tcp://127.0.0.1:1", "", 0); err != nil { // nothing listens
			t.Fatal(err)
		}
	}
	if h := f.kv.Health(); h["a"] != "connecting" || h["b"] != "connecting" {
		t.Fatalf("health %v", h)
	}
	p := prompt(5, 8)
	first := f.route(t, p, nil)
	for range 4 {
		if d := f.route(t, p, nil); d.WorkerID != first.WorkerID {
			t.Fatalf("prefix moved from %s to %s while connecting", first.WorkerID, d.WorkerID)
		}
	}
}

func TestKVPredictionDrift(t *testing.T) {
	f := newKVFixture(t, false, 1, func(c *KVConfig) { c.DriftWindow = 8 })
	p := prompt(1, 10)
	f.ingest(t, "w0", 0, storedEvent(p, 1))
	for range 8 { // predicted 9 blocks, engine says nothing cached
		f.route(t, p, func(string) int { return 0 })
	}
	if !f.board.IsActive(DiagPredictionDrift, "w0") {
		t.Fatalf("no drift: %v\n%s", f.board.Active(), f.logs)
	}
	if got := testutil.ToFloat64(f.kv.met.accuracy.WithLabelValues("w0")); got != 0 {
		t.Fatalf("accuracy = %v", got)
	}
	if got := testutil.ToFloat64(f.kv.met.predHit.WithLabelValues("w0")); got != 0 {
		t.Fatalf("hit ratio = %v", got)
	}
	for range 8 { // the engine agrees again
		f.route(t, p, func(string) int { return 9 * tbs })
	}
	if f.board.IsActive(DiagPredictionDrift, "w0") || !strings.Contains(f.logs.String(), "kv_prediction_recovered") {
		t.Fatal("drift not cleared")
	}
	if got := testutil.ToFloat64(f.kv.met.predHit.WithLabelValues("w0")); got != 1 {
		t.Fatalf("hit ratio = %v", got)
	}
}

func TestKVSoftmaxPrefersCheaper(t *testing.T) {
	f := newKVFixture(t, false, 2, func(c *KVConfig) { c.Temperature = 0.5 })
	p := prompt(1, 32)
	f.ingest(t, "w1", 0, storedEvent(p, 1))
	count := map[string]int{}
	for range 400 {
		rt, err := f.r.Route(&Request{Model: "m", Tokens: p})
		if err != nil {
			t.Fatal(err)
		}
		count[rt.Worker.ID]++
		rt.Done()
	}
	// w1 has cost ~33 vs ~64 for w0: p(w1) = 1/(1+e^-2) ≈ 0.88.
	if count["w1"] < 300 || count["w0"] < 10 {
		t.Fatalf("placement %v", count)
	}
}

func TestKVConfigValidation(t *testing.T) {
	for _, c := range []KVConfig{{BlockSize: -1}, {Temperature: -1}, {Cost: "x"}, {OnMissing: "x"}, {ApproxTTL: -time.Second}} {
		if _, err := NewKV(context.Background(), c); err == nil {
			t.Fatalf("%+v accepted", c)
		}
	}
	if _, err := ParseCostModel("dynamo"); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseOnMissing("nope"); err == nil {
		t.Fatal("bad on-missing accepted")
	}
}

// TestKeepMinReadsOnce: a value that changes between reads (a footprint
// moved by a concurrent event) must not empty the tie set.
func TestKeepMinReadsOnce(t *testing.T) {
	calls := map[int]int{}
	got := keepMin([]int{0, 1, 2}, func(i int) float64 {
		calls[i]++
		return float64(10*calls[i] - i) // grows on every read
	})
	if len(got) != 1 || got[0] != 2 {
		t.Fatalf("keepMin = %v, want [2]", got)
	}
	for i, n := range calls {
		if n != 1 {
			t.Fatalf("entry %d read %d times", i, n)
		}
	}
}

// TestKVMidStreamRoutesByRecords: a subscription whose first batch was not
// the stream's first (the slow joiner dropped the batches of the requests
// already routed there) goes live with an incomplete index. The router
// routes that worker by its records too for the rebuild window, so a
// re-request still finds the prefix, with no loss diagnostic; then it is
// healthy.
func TestKVMidStreamRoutesByRecords(t *testing.T) {
	f := newKVFixture(t, false, 0, func(c *KVConfig) { c.RebuildWindow = 200 * time.Millisecond })
	for _, id := range []string{"a", "b"} {
		f.r.AddWorker(Worker{ID: id, Model: "m"})
		// In process: no subscriber of its own, so the states below are
		// the only ones the worker sees.
		if err := f.kv.AddWorker(id, "", "", 0); err != nil {
			t.Fatal(err)
		}
	}
	p := prompt(9, 8)
	// The engine reports its cache hits, not computed blocks: no
	// BlockStored is due, so kv_events_missing stays out of the test.
	full := func(string) int { return len(p) }
	first := f.route(t, p, full)
	f.kv.mu.RLock()
	ws := map[string]*kvWorker{"a": f.kv.workers["a"], "b": f.kv.workers["b"]}
	f.kv.mu.RUnlock()
	for id, w := range ws {
		w.HandleState(kvevents.StreamStatus{State: kvevents.StreamSynced})
		// Only the worker that got the request missed its batches.
		w.HandleState(kvevents.StreamStatus{State: kvevents.StreamLive, Seq: 3, MidStream: id == first.WorkerID})
	}
	if h := f.kv.Health(); h[first.WorkerID] != "rebuilding" {
		t.Fatalf("mid-stream worker %s is %q, want rebuilding (%v)", first.WorkerID, h[first.WorkerID], h)
	}
	if d := f.route(t, p, full); d.WorkerID != first.WorkerID {
		t.Fatalf("re-request went to %s, its prefix is on %s", d.WorkerID, first.WorkerID)
	}
	if f.board.IsActive(DiagKVEventsLost, first.WorkerID) || strings.Contains(f.logs.String(), "diagnostic_code=kv_events_lost") {
		t.Fatalf("a mid-stream start raised a loss:\n%s", f.logs)
	}
	// Health() reads the state at the current time; the metric follows
	// from the window's timer, which may fire a moment later under load.
	deadline := time.Now().Add(3 * time.Second)
	for f.kv.Health()[first.WorkerID] != "healthy" {
		if time.Now().After(deadline) {
			t.Fatalf("still %q after the window", f.kv.Health()[first.WorkerID])
		}
		time.Sleep(10 * time.Millisecond)
	}
	for testutil.ToFloat64(f.kv.met.health.WithLabelValues(first.WorkerID, "healthy")) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("health metric after the window = %v", testutil.ToFloat64(f.kv.met.health.WithLabelValues(first.WorkerID, "healthy")))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestKVMissingWithoutCachedTokens: a worker whose server reports no
// cached-token count (an OpenAI-compatible look-alike) and whose event
// stream never delivers (a publisher that dials a subscriber that dials,
// nothing connects) used to sit at "connecting" with no diagnostic; its
// first computed block now raises kv_events_missing, and events clear it.
func TestKVMissingWithoutCachedTokens(t *testing.T) {
	f := newKVFixture(t, false, 1, nil)
	f.route(t, prompt(1, 4), func(string) int { return -1 })
	deadline := time.Now().Add(3 * time.Second)
	for !f.board.IsActive(DiagKVEventsMissing, "w0") {
		if time.Now().After(deadline) {
			t.Fatalf("no %s; health %v", DiagKVEventsMissing, f.kv.Health())
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.ingest(t, "w0", 0, storedEvent(prompt(1, 4), 1))
	if f.board.IsActive(DiagKVEventsMissing, "w0") {
		t.Fatal("not cleared by events")
	}
}
