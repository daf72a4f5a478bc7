package kvcache

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemllm/tandem/tokenid"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestChanged checks which cache operations close the Changed channel:
// exactly those that make new blocks findable by prefix match.
func TestChanged(t *testing.T) {
	const bs = 4
	tokens := seqTokens(100, 6*bs)
	tests := []struct {
		name    string
		noCache bool
		// setup runs before the channel is taken; op after.
		setup func(t *testing.T, c *Cache) *Seq
		op    func(t *testing.T, c *Cache, s *Seq)
		fires bool
	}{
		{
			name:  "commit of a new full block",
			setup: func(t *testing.T, c *Cache) *Seq { return allocated(t, c, tokens) },
			op:    func(_ *testing.T, c *Cache, s *Seq) { c.Commit(s, tokens[:2*bs]) },
			fires: true,
		},
		{
			name:  "commit of a partial block only",
			setup: func(t *testing.T, c *Cache) *Seq { return allocated(t, c, tokens) },
			op:    func(_ *testing.T, c *Cache, s *Seq) { c.Commit(s, tokens[:bs-1]) },
		},
		{
			name: "commit of nothing new",
			setup: func(t *testing.T, c *Cache) *Seq {
				s := allocated(t, c, tokens)
				c.Commit(s, tokens[:2*bs])
				return s
			},
			op: func(_ *testing.T, c *Cache, s *Seq) { c.Commit(s, tokens[:2*bs+1]) },
		},
		{
			name: "next chunk of a running prefill",
			setup: func(t *testing.T, c *Cache) *Seq {
				s := allocated(t, c, tokens)
				c.Commit(s, tokens[:2*bs])
				return s
			},
			op:    func(_ *testing.T, c *Cache, s *Seq) { c.Commit(s, tokens[:4*bs]) },
			fires: true,
		},
		{
			name: "deduplicated block",
			setup: func(t *testing.T, c *Cache) *Seq {
				s, _ := run(t, c, tokens[:2*bs])
				c.Free(s)
				// A second sequence computes the same blocks without
				// having matched them.
				d := &Seq{}
				if err := c.Allocate(d, 2*bs); err != nil {
					t.Fatal(err)
				}
				return d
			},
			op: func(_ *testing.T, c *Cache, s *Seq) { c.Commit(s, tokens[:2*bs]) },
		},
		{
			name:  "import of new blocks",
			setup: func(*testing.T, *Cache) *Seq { return &Seq{} },
			op: func(t *testing.T, c *Cache, s *Seq) {
				if _, err := c.Import(s, tokens); err != nil {
					t.Fatal(err)
				}
			},
			fires: true,
		},
		{
			name: "import of blocks already cached",
			setup: func(t *testing.T, c *Cache) *Seq {
				s, _ := run(t, c, tokens)
				c.Free(s)
				return &Seq{}
			},
			op: func(t *testing.T, c *Cache, s *Seq) {
				if _, err := c.Import(s, tokens[:4*bs]); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name:    "commit without prefix caching",
			noCache: true,
			setup:   func(t *testing.T, c *Cache) *Seq { return allocated(t, c, tokens) },
			op:      func(_ *testing.T, c *Cache, s *Seq) { c.Commit(s, tokens) },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{NumBlocks: 32, BlockSize: bs, DisablePrefixCaching: tc.noCache})
			if err != nil {
				t.Fatal(err)
			}
			s := tc.setup(t, c)
			ch := c.Changed()
			if closed(ch) {
				t.Fatal("Changed is closed before anything happened")
			}
			if again := c.Changed(); again != ch {
				t.Fatal("two waiters with no commit between them got different channels")
			}
			tc.op(t, c, s)
			if got := closed(ch); got != tc.fires {
				t.Fatalf("Changed closed = %v, want %v", got, tc.fires)
			}
			if tc.fires && closed(c.Changed()) {
				t.Fatal("the channel after a commit is already closed")
			}
			if err := c.Validate(s); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// allocated returns a Seq holding slots for all of tokens, nothing
// committed: a prefill about to run chunk by chunk.
func allocated(t *testing.T, c *Cache, tokens []tokenid.ID) *Seq {
	t.Helper()
	s := &Seq{}
	if err := c.Allocate(s, len(tokens)); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestChangedAcrossGoroutines is the exporter's pattern: a goroutine that
// takes the channel, then looks at how much is committed (here an atomic
// the owner publishes after each Commit), then waits, must see every
// commit and end; the owner commits one block at a time meanwhile. Run
// with -race: Changed is the cache's only concurrent entry point.
func TestChangedAcrossGoroutines(t *testing.T) {
	const bs, blocks, waiters = 2, 500, 4
	c, err := New(Config{NumBlocks: blocks + 1, BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	tokens := seqTokens(1, blocks*bs)
	s := allocated(t, c, tokens)
	var committed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan string, waiters)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.After(10 * time.Second)
			for {
				ch := c.Changed()
				if committed.Load() == blocks {
					return
				}
				select {
				case <-ch:
				case <-deadline:
					errs <- "a waiter missed a commit (stuck below the last block)"
					return
				}
			}
		}()
	}
	for i := 1; i <= blocks; i++ {
		// The count is published before Commit signals, as the cache's own
		// state is: a waiter that takes the channel a commit then closes
		// has read the count before it, never a count still to come
		// (storing after Commit let a waiter take the last channel, read
		// blocks-1, and wait on a channel no commit would close).
		committed.Store(int64(i))
		c.Commit(s, tokens[:i*bs])
		if i%50 == 0 {
			// Let the waiters run between bursts of commits.
			time.Sleep(time.Millisecond)
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

// TestCommitNotifyIsCheap: the scheduler's per-step Commit must not pay
// for the notifier, neither when nothing new is committed nor when nobody
// waits.
func TestCommitNotifyIsCheap(t *testing.T) {
	const bs = 4
	c, err := New(Config{NumBlocks: 8, BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	tokens := seqTokens(7, 8*bs)
	s := allocated(t, c, tokens)
	c.Commit(s, tokens[:2*bs])
	_ = c.Changed() // a waiter that is never woken by the calls below
	if a := testing.AllocsPerRun(100, func() { c.Commit(s, tokens[:2*bs+1]) }); a != 0 {
		t.Fatalf("Commit with nothing new allocates %v times", a)
	}
	// Firing with nobody waiting (the channel was just consumed) must not
	// allocate a channel.
	c.Commit(s, tokens[:3*bs])
	n := &c.changed
	if a := testing.AllocsPerRun(100, n.fire); a != 0 {
		t.Fatalf("firing with no waiter allocates %v times", a)
	}
}
