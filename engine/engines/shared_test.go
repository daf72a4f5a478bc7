package engines

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/spf13/pflag"

	"github.com/tandemllm/tandem/engine"
)

// TestMockerSharedDiskFlag: --kv-offload-disk-shared gives the in-process
// mocker workers of each --kv-offload-shared-workers group one simulated
// disk: a prefix worker 0 computed and pushed out to its disk is onboarded
// by worker 1 on its first request for it (cached tokens > 0), not by
// worker 2 of the next group, and the workers name their shared disk for
// the router.
func TestMockerSharedDiskFlag(t *testing.T) {
	testSharedFlag(t, []string{"--kv-offload-disk-bytes", "1GiB", "--kv-offload-disk-shared"},
		func(e engine.Engine) string { return e.(interface{ KVSharedTier() string }).KVSharedTier() },
		[]string{"--kv-offload-host-bytes", "1GiB", "--kv-offload-disk-shared"})
}

// TestMockerSharedHostFlag: --kv-offload-host-shared is the same for the
// host-memory tier: worker 1 onboards from the pool it shares with worker
// 0 what worker 0 pushed out of its pool, worker 2 (another pool) does
// not, and the workers name their shared pool for the router.
func TestMockerSharedHostFlag(t *testing.T) {
	testSharedFlag(t, []string{"--kv-offload-host-bytes", "1GiB", "--kv-offload-host-shared"},
		func(e engine.Engine) string { return e.(interface{ KVSharedHost() string }).KVSharedHost() },
		[]string{"--kv-offload-disk-bytes", "1GiB", "--kv-offload-host-shared"})
}

// testSharedFlag runs three in-process mocker workers, two per shared tier
// (tierFlags), through a prefix pushed out of worker 0's pool; name is
// the workers' name of their shared tier; badFlags must be refused.
func testSharedFlag(t *testing.T, tierFlags []string, name func(engine.Engine) string, badFlags []string) {
	cfg := &Config{}
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse(append([]string{"--engine", "mocker", "--instant", "--kv-events", "off", "--kv-capacity-tokens", "1024",
		"--kv-offload-shared-workers", "2"}, tierFlags...)); err != nil {
		t.Fatal(err)
	}
	_, factory, err := cfg.Build(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ws := make([]engine.Engine, 3)
	for i := range ws {
		if ws[i], err = factory(i); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws[i].Close() })
	}
	if n0, n1, n2 := name(ws[0]), name(ws[1]), name(ws[2]); n0 == "" || n0 != n1 || n2 == n0 {
		t.Fatalf("shared tier names %q %q %q: want workers 0 and 1 on one, 2 on another", n0, n1, n2)
	}
	seq := func(start, n int) []engine.Token {
		p := make([]engine.Token, n)
		for i := range p {
			p[i] = engine.Token(start + i)
		}
		return p
	}
	cached := func(e engine.Engine, p []engine.Token) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30e9)
		defer cancel()
		s, err := e.Generate(ctx, &engine.Request{Prompt: p, MaxTokens: 1})
		if err != nil {
			t.Fatal(err)
		}
		c := -1
		for {
			d, err := s.Recv()
			if errors.Is(err, io.EOF) {
				return c
			}
			if err != nil {
				t.Fatal(err)
			}
			if c < 0 {
				c = d.CachedTokens
			}
		}
	}
	doc := seq(100, 600)
	cached(ws[0], doc)
	cached(ws[0], seq(5000, 900)) // push doc out of worker 0's pool, to the disk
	cached(ws[0], seq(9000, 900))
	ask := append(append([]engine.Token(nil), doc...), seq(20000, 16)...)
	if c := cached(ws[1], ask); c < 512 {
		t.Fatalf("worker 1's first request for worker 0's prefix: %d cached tokens, want it onboarded from the shared tier", c)
	}
	if c := cached(ws[2], ask); c != 0 {
		t.Fatalf("worker 2, of another shared tier: %d cached tokens, want 0", c)
	}
	// Without the tier there is nothing to share.
	bad := &Config{}
	fs = pflag.NewFlagSet("serve", pflag.ContinueOnError)
	bad.AddFlags(fs)
	if err := fs.Parse(badFlags); err != nil {
		t.Fatal(err)
	}
	if _, err := bad.tiers.mockerTiers(); err == nil {
		t.Fatalf("%v accepted", badFlags)
	}
}
