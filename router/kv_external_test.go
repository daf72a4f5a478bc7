package router

import (
	"sync"
	"testing"
	"time"
)

// fakeQueue is an engine's queue report (engine.QueueReporter) that a test
// sets; the real one, an upstream server's /metrics, is exercised in
// serve's TestUpstreamExternalLoad.
type fakeQueue struct {
	mu               sync.Mutex
	running, waiting int
	at               time.Time
	ok               bool
}

func (q *fakeQueue) EngineQueue() (int, int, time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running, q.waiting, q.at, q.ok
}

func (q *fakeQueue) set(running, waiting int, at time.Time) {
	q.mu.Lock()
	q.running, q.waiting, q.at, q.ok = running, waiting, at, true
	q.mu.Unlock()
}

// TestExternalLoadSteersColdTraffic: a worker whose engine reports
// requests this router never sent (another client of the same server)
// loses cold requests to an idle one under every cost, and wins its share
// back once the report clears or goes stale.
func TestExternalLoadSteersColdTraffic(t *testing.T) {
	for _, cost := range []CostModel{CostTTFT, CostTandem, CostDynamo} {
		t.Run(string(cost), func(t *testing.T) {
			f, clk := newTTFTFixture(t, 2, cost, fakeTiming{base: 0.01, perTok: 50e-6, dec: 0.01})
			q := &fakeQueue{}
			for _, w := range f.r.Workers() {
				if w.ID == "w0" {
					w.Queue = q
					f.r.AddWorker(w)
				}
			}
			count := func(n, from int) map[string]int {
				got := map[string]int{}
				for i := range n {
					got[f.route(t, prompt(from+i, 4), nil).WorkerID]++
				}
				return got
			}
			// Ten requests waiting and four running on w0, none of them
			// ours: every cold request goes to w1.
			q.set(4, 10, clk.Now())
			if got := count(20, 100); got["w1"] != 20 {
				t.Fatalf("w0 reports 10 waiting: routed %v, want all 20 on w1", got)
			}
			// The others' load is gone: the spread returns.
			q.set(0, 0, clk.Now())
			if got := count(20, 200); got["w0"] < 5 || got["w1"] < 5 {
				t.Fatalf("w0 idle again: routed %v, want both used", got)
			}
			// A stale report counts for nothing.
			q.set(4, 10, clk.Now())
			clk.Add(externalMaxAge + time.Second)
			if got := count(20, 300); got["w0"] < 5 || got["w1"] < 5 {
				t.Fatalf("stale report: routed %v, want both used", got)
			}
		})
	}
}

// TestExternalSubtractsOwn: the engine's report counts this router's
// requests too; only the excess is someone else's.
func TestExternalSubtractsOwn(t *testing.T) {
	now := time.Unix(1000, 0)
	tests := []struct {
		name                          string
		running, waiting, own, ownPre int
		want                          externalLoad
	}{
		{"all ours", 3, 2, 5, 2, externalLoad{}},
		{"others waiting", 3, 6, 5, 2, externalLoad{running: 0, waiting: 4}},
		{"others running", 7, 2, 5, 2, externalLoad{running: 4}},
		{"report older than our sends", 0, 0, 5, 5, externalLoad{}},
		{"waiting beyond total", 0, 9, 2, 0, externalLoad{waiting: 7}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := &KV{}
			w := &kvWorker{k: k}
			q := &fakeQueue{}
			q.set(tc.running, tc.waiting, now)
			w.setQueue(q)
			got, ok := w.external(now.UnixNano(), tc.own, tc.ownPre)
			if !ok || got != tc.want {
				t.Fatalf("external(%d running, %d waiting; own %d, %d prefilling) = %+v %v, want %+v", tc.running, tc.waiting, tc.own, tc.ownPre, got, ok, tc.want)
			}
		})
	}
	w := &kvWorker{k: &KV{}}
	w.setQueue(&fakeQueue{})
	if _, ok := w.external(now.UnixNano(), 0, 0); ok {
		t.Fatal("an engine with no measurement yet reported load")
	}
	w.setQueue(nil)
	if w.k.externals.Load() != 0 {
		t.Fatalf("externals %d after removal, want 0", w.k.externals.Load())
	}
}
