package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/etcdtest"
)

func testRecord(id string) Record {
	return Record{
		ID: id, Model: "tandem-mock", Role: RoleAggregated, RequestPlane: "127.0.0.1:4000",
		KVEvents:       KVEvents{Endpoint: "tcp://127.0.0.1:5557", Format: "map"},
		KVLayout:       KVLayout{Model: "tandem-mock", DType: "bf16", BlockSize: 16},
		CapacityBlocks: 1024, Engine: "mocker", Version: "test",
		// Every backend carries the shared tiers' names (file and etcd
		// as JSON, mem as the value; kube's annotation in its own test).
		KVShare: KVShare{Host: "host-a/1234/host0", Disk: "native:host-a:/var/lib/tandem/kv"},
	}
}

// watchLog runs Watch in the background and keeps every event.
type watchLog struct {
	t      *testing.T
	mu     sync.Mutex
	events []Event
	live   map[string]Record
	synced bool
	cancel context.CancelFunc
	done   chan error
}

func startWatch(t *testing.T, r Registry) *watchLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watchLog{t: t, live: map[string]Record{}, cancel: cancel, done: make(chan error, 1)}
	go func() {
		w.done <- r.Watch(ctx, func(e Event) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.events = append(w.events, e)
			switch e.Type {
			case EventPut:
				w.live[e.Record.ID] = e.Record
			case EventDelete:
				delete(w.live, e.Record.ID)
			case EventSynced:
				w.synced = true
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-w.done; err != nil {
			t.Errorf("Watch returned %v after cancel, want nil", err)
		}
	})
	return w
}

// waitFor polls cond (under the log's lock) until it holds or d passes.
func (w *watchLog) waitFor(d time.Duration, what string, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(d)
	for {
		w.mu.Lock()
		ok := cond()
		w.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.t.Fatalf("timed out waiting for %s; events: %v", what, w.events)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (w *watchLog) liveIDs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []string
	for id := range w.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (w *watchLog) count(t EventType, id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, e := range w.events {
		if e.Type == t && e.Record.ID == id {
			n++
		}
	}
	return n
}

// backend builds two Registries on one store: a worker's and a frontend's
// (the same value for mem, which has no store outside the process).
type backend struct {
	name string
	open func(t *testing.T, board *health.Board) (worker, frontend Registry)
}

func backends() []backend {
	return []backend{
		{"mem", func(t *testing.T, _ *health.Board) (Registry, Registry) {
			m := NewMem()
			t.Cleanup(func() { _ = m.Close() })
			return m, m
		}},
		{"file", func(t *testing.T, board *health.Board) (Registry, Registry) {
			dir := t.TempDir()
			open := func() Registry {
				f, err := NewFile(FileConfig{Dir: dir, PollInterval: 10 * time.Millisecond,
					Common: Common{TTL: time.Second, Board: board, Logger: slog.New(slog.DiscardHandler)}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = f.Close() })
				return f
			}
			return open(), open()
		}},
		{"etcd", func(t *testing.T, board *health.Board) (Registry, Registry) {
			srv := etcdtest.Start(t)
			return openEtcd(t, srv, board, time.Second), openEtcd(t, srv, board, time.Second)
		}},
	}
}

func openEtcd(t *testing.T, srv *etcdtest.Server, board *health.Board, ttl time.Duration) *Etcd {
	t.Helper()
	e, err := NewEtcd(EtcdConfig{Endpoints: []string{srv.Endpoint()}, ProbeInterval: 100 * time.Millisecond,
		Common: Common{TTL: ttl, Board: board, Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestRegistryContract runs the behaviour every backend promises.
func TestRegistryContract(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
			wreg, freg := b.open(t, board)
			ctx := context.Background()
			before, err := wreg.Register(ctx, testRecord("w-before"))
			if err != nil {
				t.Fatal(err)
			}
			w := startWatch(t, freg)
			w.waitFor(5*time.Second, "initial sync", func() bool { return w.synced && len(w.live) == 1 })
			if w.events[0].Type != EventPut || w.events[1].Type != EventSynced {
				t.Fatalf("want Put then Synced first, got %v", w.events)
			}
			if got := w.events[0].Record; got != testRecord("w-before") {
				t.Fatalf("record read back %+v, want %+v", got, testRecord("w-before"))
			}

			l1, err := wreg.Register(ctx, testRecord("w1"))
			if err != nil {
				t.Fatal(err)
			}
			w.waitFor(5*time.Second, "w1", func() bool { return len(w.live) == 2 })

			changed := testRecord("w1")
			changed.RequestPlane = "127.0.0.1:4001"
			l1b, err := wreg.Register(ctx, changed)
			if err != nil {
				t.Fatal(err)
			}
			w.waitFor(5*time.Second, "w1 changed", func() bool { return w.live["w1"].RequestPlane == "127.0.0.1:4001" })

			// The first registration's lease no longer owns the id: revoking
			// it must not remove the successor.
			if err := l1.Revoke(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			if got := w.liveIDs(); !slices.Equal(got, []string{"w-before", "w1"}) {
				t.Fatalf("after revoking the stale lease: live %v", got)
			}

			for _, l := range []Lease{l1b, before} {
				if err := l.Revoke(ctx); err != nil {
					t.Fatal(err)
				}
				if err := l.Revoke(ctx); err != nil {
					t.Fatalf("second Revoke: %v", err)
				}
			}
			w.waitFor(5*time.Second, "all revoked", func() bool { return len(w.live) == 0 })
			if n := w.count(EventDelete, "w1"); n != 1 {
				t.Fatalf("%d deletes of w1, want 1", n)
			}
			if _, err := wreg.Register(ctx, Record{ID: "bad id"}); err == nil {
				t.Fatal("an invalid record was accepted")
			}
		})
	}
}

// TestRegistryLeasesKeepRecordsAlive: a record outlives several TTLs while
// its lease is held, and a second watcher started late sees it.
func TestRegistryLeasesKeepRecordsAlive(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			wreg, freg := b.open(t, nil)
			if _, err := wreg.Register(context.Background(), testRecord("w1")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2500 * time.Millisecond) // 2.5 TTLs of the file backend
			w := startWatch(t, freg)
			w.waitFor(5*time.Second, "sync", func() bool { return w.synced })
			if got := w.liveIDs(); !slices.Equal(got, []string{"w1"}) {
				t.Fatalf("live %v after 2.5 TTLs, want [w1]", got)
			}
		})
	}
}

func TestViewReportsOnlyDifferences(t *testing.T) {
	var got []string
	v := newView(func(e Event) { got = append(got, fmt.Sprintf("%s:%s", e.Type, e.Record.ID)) })
	a, b := testRecord("a"), testRecord("b")
	b2 := b
	b2.Version = "2"
	steps := []struct {
		set  []Record
		want []string
	}{
		{[]Record{a, b}, []string{"put:a", "put:b", "synced:"}},
		{[]Record{a, b}, nil},
		{[]Record{b2}, []string{"delete:a", "put:b"}},
		{nil, []string{"delete:b"}},
	}
	for i, s := range steps {
		got = nil
		m := map[string]Record{}
		for _, r := range s.set {
			m[r.ID] = r
		}
		v.replace(m)
		if !slices.Equal(got, s.want) {
			t.Fatalf("step %d: events %v, want %v", i, got, s.want)
		}
	}
}
