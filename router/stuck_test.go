package router

import (
	"sync"
	"testing"
	"time"
)

// hookLog records what the router's hooks heard.
type hookLog struct {
	mu  sync.Mutex
	got []string
}

func (h *hookLog) add(s string) { h.mu.Lock(); h.got = append(h.got, s); h.mu.Unlock() }
func (h *hookLog) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.got
	h.got = nil
	return g
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A worker that holds a request and produces nothing for the threshold is
// reported stuck and skipped; it clears on progress, or when it holds no
// more work.
func TestStuckWorkerSkippedAndCleared(t *testing.T) {
	r := newTestRouter(&RoundRobin{}, "w0", "w1")
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	r.SetStuckAfter(10 * time.Second)
	var h hookLog
	r.SetStuckHook(func(w string, stuck bool, _ time.Duration) {
		if stuck {
			h.add("stuck " + w)
		} else {
			h.add("ok " + w)
		}
	})
	held, _ := r.Route(&Request{Model: "m"}) // w0, never answers
	if held.Worker.ID != "w0" {
		t.Fatal(held.Worker.ID)
	}
	now = now.Add(11 * time.Second)
	for range 3 {
		rt, _ := r.Route(&Request{Model: "m"})
		if rt.Worker.ID != "w1" {
			t.Fatalf("routed to stuck %s", rt.Worker.ID)
		}
		rt.FirstToken(0)
		rt.Done()
	}
	if got := h.take(); !equal(got, []string{"stuck w0"}) {
		t.Fatalf("hooks %v", got)
	}
	if got := r.CheckStuck(); !equal(got, []string{"w0"}) {
		t.Fatalf("CheckStuck %v", got)
	}
	held.Progress(now) // it answers after all
	if got := h.take(); !equal(got, []string{"ok w0"}) {
		t.Fatalf("hooks after progress %v", got)
	}
	now = now.Add(11 * time.Second)
	if got := r.CheckStuck(); !equal(got, []string{"w0"}) {
		t.Fatalf("silent again: %v", got)
	}
	held.Done() // the request ends: no work held, nothing to be stuck on
	if got := h.take(); !equal(got, []string{"stuck w0", "ok w0"}) {
		t.Fatalf("hooks after done %v", got)
	}
	if got := r.CheckStuck(); len(got) != 0 {
		t.Fatalf("idle worker stuck: %v", got)
	}
}

// Finding 5 of issue 12: worker_unreachable was raised after the worker was
// removed and never cleared. A failure on a departed worker raises nothing;
// a worker that leaves or re-registers clears its flag.
func TestUnreachableClearsWhenWorkerLeaves(t *testing.T) {
	r := newTestRouter(&RoundRobin{}, "w0", "w1")
	var h hookLog
	r.SetReachabilityHook(func(w string, ok bool, _ time.Duration) {
		if ok {
			h.add("reachable " + w)
		} else {
			h.add("unreachable " + w)
		}
	})
	rt, _ := r.Route(&Request{Model: "m"})
	rt.Unreachable()
	rt.Done()
	r.RemoveWorker("w0")
	if got := h.take(); !equal(got, []string{"unreachable w0", "reachable w0"}) {
		t.Fatalf("remove: %v", got)
	}
	// A request that was in flight on the departed worker fails late.
	r.AddWorker(Worker{ID: "w2", Model: "m"})
	late, _ := r.Route(&Request{Model: "m"})
	r.RemoveWorker(late.Worker.ID)
	late.Unreachable()
	late.Done()
	if got := h.take(); len(got) != 0 {
		t.Fatalf("a departed worker's failure raised %v", got)
	}
	// Re-registration under the same id starts clean.
	rt, _ = r.Route(&Request{Model: "m"}) // the one left
	rt.Unreachable()
	rt.Done()
	r.AddWorker(Worker{ID: rt.Worker.ID, Model: "m"})
	if id := rt.Worker.ID; !equal(h.take(), []string{"unreachable " + id, "reachable " + id}) {
		t.Fatal("re-registration did not clear the flag")
	}
}
