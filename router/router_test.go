package router

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func newTestRouter(p Policy, ids ...string) *Router {
	r := New(p, nil)
	for _, id := range ids {
		r.AddWorker(Worker{ID: id, Model: "m"})
	}
	return r
}

func TestRoundRobinCyclesInIDOrder(t *testing.T) {
	r := newTestRouter(&RoundRobin{}, "w2", "w0", "w1")
	var got []string
	for i := 0; i < 6; i++ {
		rt, err := r.Route(&Request{Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rt.Worker.ID)
		rt.Done()
	}
	want := []string{"w0", "w1", "w2", "w0", "w1", "w2"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestRouteErrors(t *testing.T) {
	r := newTestRouter(&RoundRobin{}, "w0")
	tests := []struct {
		name    string
		model   string
		exclude []string
		want    error
	}{
		{"unknown model", "nope", nil, ErrUnknownModel},
		{"all excluded", "m", []string{"w0"}, ErrNoWorker},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Route(&Request{Model: tc.model}, tc.exclude...)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	r.RemoveWorker("w0")
	if _, err := r.Route(&Request{Model: "m"}); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("known model without workers: err = %v, want ErrNoWorker", err)
	}
}

func TestLoadAccountingReturnsToZero(t *testing.T) {
	r := newTestRouter(LeastLoaded{}, "a", "b")
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rt, err := r.Route(&Request{Model: "m", Tokens: make([]int32, i%7)})
			if err != nil {
				t.Error(err)
				return
			}
			if i%2 == 0 {
				rt.FirstToken(0)
				rt.FirstToken(0)
			}
			rt.Done()
			rt.Done()
		}(i)
	}
	wg.Wait()
	for _, s := range r.workers {
		if s.active != 0 || s.prefilling != 0 || s.prefillTokens != 0 {
			t.Fatalf("%s: load left active %d prefilling %d tokens %d", s.ID, s.active, s.prefilling, s.prefillTokens)
		}
	}
}

func TestLeastLoadedPrefersIdle(t *testing.T) {
	r := newTestRouter(LeastLoaded{}, "a", "b")
	busy, _ := r.Route(&Request{Model: "m", Tokens: make([]int32, 100)})
	next, _ := r.Route(&Request{Model: "m", Tokens: make([]int32, 10)})
	if busy.Worker.ID == next.Worker.ID {
		t.Fatalf("both on %s", busy.Worker.ID)
	}
}

type recorder struct {
	Random
	mu     sync.Mutex
	events []string
}

func (o *recorder) Routed(*Request, Decision) { o.add("routed") }
func (o *recorder) FirstToken(_ *Request, _ string, c int) {
	o.add("first")
}
func (o *recorder) Finished(*Request, string) { o.add("finished") }
func (o *recorder) WorkerRemoved(id string)   { o.add("removed " + id) }
func (o *recorder) add(s string) {
	o.mu.Lock()
	o.events = append(o.events, s)
	o.mu.Unlock()
}

func TestObserverLifecycle(t *testing.T) {
	o := &recorder{}
	r := newTestRouter(o, "a")
	rt, _ := r.Route(&Request{Model: "m"})
	rt.FirstToken(16)
	rt.Done()
	r.RemoveWorker("a")
	want := []string{"routed", "first", "finished", "removed a"}
	if len(o.events) != len(want) {
		t.Fatalf("events %v", o.events)
	}
	for i := range want {
		if o.events[i] != want[i] {
			t.Fatalf("events %v, want %v", o.events, want)
		}
	}
}

// TestQuarantine: a worker that could not be reached gets no requests for
// a window that doubles with every failure in a row (unless nothing else
// is left), and one first token ends it.
func TestQuarantine(t *testing.T) {
	r := newTestRouter(&RoundRobin{}, "w0", "w1")
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	r.jitter = func(n int64) int64 { return n - 1 } // every window its ceiling
	var heard []string
	r.SetReachabilityHook(func(w string, reachable bool, d time.Duration) {
		heard = append(heard, fmt.Sprintf("%s %v %v", w, reachable, d))
	})
	route := func(exclude ...string) string {
		t.Helper()
		rt, err := r.Route(&Request{Model: "m"}, exclude...)
		if err != nil {
			t.Fatal(err)
		}
		rt.Done()
		return rt.Worker.ID
	}
	fail := func(id string) {
		t.Helper()
		for {
			rt, err := r.Route(&Request{Model: "m"})
			if err != nil {
				t.Fatal(err)
			}
			if rt.Worker.ID == id {
				rt.Unreachable()
				rt.Done()
				return
			}
			rt.Done()
		}
	}
	fail("w0")
	for range 4 {
		if got := route(); got != "w1" {
			t.Fatalf("quarantined w0 got a request")
		}
	}
	if got := route("w1"); got != "w0" {
		t.Fatalf("with w1 excluded, the quarantined w0 is still tried: got %s", got)
	}
	now = now.Add(300 * time.Millisecond) // past the first 250 ms window
	fail("w0")
	now = now.Add(300 * time.Millisecond) // inside the doubled 500 ms one
	if got := route(); got != "w1" {
		t.Fatal("w0 left quarantine before its doubled window ended")
	}
	now = now.Add(300 * time.Millisecond)
	for {
		rt, err := r.Route(&Request{Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		rt.FirstToken(0)
		rt.Done()
		if rt.Worker.ID == "w0" {
			break
		}
	}
	want := []string{"w0 false 250ms", "w0 false 500ms", "w0 true 0s"}
	if fmt.Sprint(heard) != fmt.Sprint(want) {
		t.Fatalf("hook heard %v, want %v", heard, want)
	}
}
