package discovery

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/etcdtest"
)

// TestEtcdDeadWorkerExpires: a worker that dies without revoking (its
// keepalive simply stops) leaves within its TTL, and not before a TTL
// has mostly passed.
func TestEtcdDeadWorkerExpires(t *testing.T) {
	srv := etcdtest.Start(t)
	const ttl = 2 * time.Second
	dying := openEtcd(t, srv, nil, ttl)
	if _, err := dying.Register(context.Background(), testRecord("w1")); err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, openEtcd(t, srv, nil, ttl))
	w.waitFor(5*time.Second, "w1", func() bool { return len(w.live) == 1 })
	killed := time.Now()
	dying.abandon()
	w.waitFor(ttl+3*time.Second, "w1 to expire", func() bool { return len(w.live) == 0 })
	gone := time.Since(killed)
	if gone > ttl+time.Second {
		t.Fatalf("w1 left %v after dying, want within its TTL %v (+1 s of etcd's expiry tick)", gone, ttl)
	}
	t.Logf("dead worker left after %v (TTL %v)", gone.Round(10*time.Millisecond), ttl)
}

// TestEtcdRestart: etcd going away raises discovery_unavailable while
// watchers keep the last known workers; when it comes back, with or
// without its data, the diagnostic clears and every live worker is listed
// again (a worker whose lease was lost registers again).
func TestEtcdRestart(t *testing.T) {
	for _, keep := range []bool{true, false} {
		name := "data lost"
		if keep {
			name = "data kept"
		}
		t.Run(name, func(t *testing.T) {
			srv := etcdtest.Start(t)
			board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
			wreg := openEtcd(t, srv, nil, time.Second)
			if _, err := wreg.Register(context.Background(), testRecord("w1")); err != nil {
				t.Fatal(err)
			}
			w := startWatch(t, openEtcd(t, srv, board, time.Second))
			w.waitFor(5*time.Second, "w1", func() bool { return len(w.live) == 1 })

			// The embedded server's Close waits up to its request timeout
			// (5 s) for our open watch streams: the slow part of this test.
			srv.Stop()
			waitBoard(t, board, true)
			time.Sleep(1500 * time.Millisecond) // longer than the TTL: no worker is dropped for etcd's absence
			if got := w.liveIDs(); !slices.Equal(got, []string{"w1"}) {
				t.Fatalf("live %v during the outage, want the last known [w1]", got)
			}
			srv.Restart(keep)
			t0 := time.Now()
			waitBoard(t, board, false)
			w.waitFor(10*time.Second, "w1 after the restart", func() bool { return len(w.live) == 1 })
			t.Logf("etcd back and w1 listed %v after the restart", time.Since(t0).Round(time.Millisecond))

			// A worker registered after the restart is seen too.
			if _, err := wreg.Register(context.Background(), testRecord("w2")); err != nil {
				t.Fatal(err)
			}
			w.waitFor(5*time.Second, "w2", func() bool { return len(w.live) == 2 })
			// And w1 stays: its keepalive (or its new lease) holds.
			time.Sleep(1500 * time.Millisecond)
			if got := w.liveIDs(); !slices.Equal(got, []string{"w1", "w2"}) {
				t.Fatalf("live %v after the restart, want [w1 w2]", got)
			}
		})
	}
}

func waitBoard(t *testing.T, board *health.Board, active bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for board.IsActive(DiagUnavailable, etcdSubject) != active {
		if time.Now().After(deadline) {
			t.Fatalf("discovery_unavailable active = %v, want %v", !active, active)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEtcdInvalidRecord: a foreign or broken value under the prefix is
// reported and skipped, not fatal to the watch.
func TestEtcdInvalidRecord(t *testing.T) {
	srv := etcdtest.Start(t)
	board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
	reg := openEtcd(t, srv, board, time.Second)
	if _, err := reg.Register(context.Background(), testRecord("w1")); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	bad := reg.prefix + "junk"
	if _, err := cli.Put(ctx, bad, "{not json"); err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, reg)
	w.waitFor(5*time.Second, "w1", func() bool { return w.synced && len(w.live) == 1 })
	if !board.IsActive(DiagRecordInvalid, "etcd:"+bad) {
		t.Fatal("invalid record not reported")
	}
	if _, err := cli.Delete(ctx, bad); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for board.IsActive(DiagRecordInvalid, "etcd:"+bad) {
		if time.Now().After(deadline) {
			t.Fatal("diagnostic not cleared after the key was deleted")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
