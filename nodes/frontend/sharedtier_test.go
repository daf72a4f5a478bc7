package frontend

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/nodes/worker"
	"github.com/tandemllm/tandem/router"
)

// startEngine is startRole for an aggregated worker whose engine the test
// drives directly (its events still reach the frontend over its socket).
func (h *harness) startEngine(id string, edit func(*mocker.Config)) *mocker.Engine {
	h.t.Helper()
	mc := mocker.DefaultConfig()
	mc.Model = h.model.Name
	mc.EOS = h.model.Tokenizer.EOS()
	mc.Vocabulary = h.model.Tokenizer.Encode(mocker.DefaultText)
	mc.Speedup = 1000
	mc.KVEvents.Endpoint = "tcp://127.0.0.1:0"
	edit(&mc)
	e, err := mocker.New(mc)
	if err != nil {
		h.t.Fatal(err)
	}
	cfg := worker.DefaultConfig()
	cfg.ID, cfg.DeregisterDelay = id, 0
	w, err := worker.Start(context.Background(), cfg, e, h.model, worker.Options{Registry: h.reg, Logger: quiet})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
	return e
}

// TestSharedTierFromRecord: two gRPC mocker workers that share a host
// memory pool say so in their discovery records (kv_share), and the
// frontend's router makes them one share group from the records alone
// (its timing for a worker in another process knows nothing of tiers):
// a prefix w1 computed and pushed out of its pool into the shared pool is
// credited to w2, which never saw it, and w2's first request for it is
// served from cache. Without the shared pool, w2 is credited nothing.
func TestSharedTierFromRecord(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shared bool
	}{{"shared host pool", true}, {"own host tiers", false}} {
		t.Run(tc.name, func(t *testing.T) {
			// A stream that lost a batch rebuilds for RebuildWindow; keep
			// that short so a warm-up loss costs the test little.
			h := newHarnessWith(t, "kv", func(c *Config) { c.KV.RebuildWindow = 200 * time.Millisecond }, Options{})
			pool := mocker.NewSharedHost("host-a/pool0")
			engines := map[string]*mocker.Engine{}
			for _, id := range []string{"w1", "w2"} {
				engines[id] = h.startEngine(id, func(c *mocker.Config) {
					c.KVCapacityTokens = 512
					c.Tiers = mocker.TierConfig{HostBytes: 1 << 30}
					if tc.shared {
						c.Tiers.SharedHost = pool
					}
				})
			}
			h.waitMembers("w1", "w2")
			gen := func(e *mocker.Engine, p []engine.Token) int {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				s, err := e.Generate(ctx, &engine.Request{Prompt: p, MaxTokens: 1})
				if err != nil {
					t.Fatal(err)
				}
				cached := -1
				for {
					d, err := s.Recv()
					if errors.Is(err, io.EOF) {
						return cached
					}
					if err != nil {
						t.Fatal(err)
					}
					if cached < 0 {
						cached = d.CachedTokens
					}
				}
			}
			seq := func(start, n int) []engine.Token {
				p := make([]engine.Token, n)
				for i := range p {
					p[i] = engine.Token(start + i)
				}
				return p
			}
			// Publish only once both streams are live: a stream is syncing
			// until a batch of its own arrives, and a batch sent before the
			// subscription took effect is lost (ZMQ's slow joiner) with
			// nothing after it to show the gap, so a worker still syncing
			// publishes again (a small prompt of its own, new each time);
			// one whose next batch showed the gap rebuilds, then is healthy.
			deadline := time.Now().Add(20 * time.Second)
			for n, hs := 0, h.fe.KV.Health(); hs["w1"] != "healthy" || hs["w2"] != "healthy"; n, hs = n+1, h.fe.KV.Health() {
				if time.Now().After(deadline) {
					t.Fatalf("streams %v, want both healthy", hs)
				}
				for i, id := range []string{"w1", "w2"} {
					if hs[id] == "syncing" && n%10 == 0 {
						gen(engines[id], seq(50000+(2*n/10+i)*32, 32))
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
			doc := seq(100, 160)
			gen(engines["w1"], doc)
			gen(engines["w1"], seq(5000, 400)) // push doc out of w1's pool into host memory
			gen(engines["w1"], seq(9000, 400))
			ask := append(append([]engine.Token(nil), doc...), seq(20000, 8)...)
			// Events on w1's stream arrive in order: once a last prompt's
			// blocks are credited to w1, its offloads before it are in.
			marker := seq(40000, 48)
			gen(engines["w1"], marker)
			credited := func(id string, p []engine.Token) int {
				d, err := h.fe.KV.Pick(&router.Request{Model: h.model.Name, Tokens: p}, []router.Candidate{{ID: id}})
				if err != nil {
					t.Fatal(err)
				}
				return d.PredictedCachedTokens
			}
			for credited("w1", append(marker, 1)) < 48 {
				if time.Now().After(deadline) {
					t.Fatalf("w1 credited %d tokens of its last prompt; streams %v", credited("w1", append(marker, 1)), h.fe.KV.Health())
				}
				time.Sleep(10 * time.Millisecond)
			}
			if c := credited("w1", ask); c < 128 {
				t.Fatalf("w1 credited %d tokens of its offloaded prefix", c)
			}
			got := credited("w2", ask)
			cached := gen(engines["w2"], ask)
			if tc.shared && (got < 128 || cached < 128) {
				t.Fatalf("w2 credited %d, served %d cached tokens of w1's prefix in the shared pool; want ≥ 128 each", got, cached)
			}
			if !tc.shared && (got != 0 || cached != 0) {
				t.Fatalf("w2 credited %d, served %d cached tokens of w1's own host tier; want 0", got, cached)
			}
		})
	}
}
