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
	cfg := &Config{}
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse([]string{"--engine", "mocker", "--instant", "--kv-events", "off", "--kv-capacity-tokens", "1024",
		"--kv-offload-disk-bytes", "1GiB", "--kv-offload-disk-shared", "--kv-offload-shared-workers", "2"}); err != nil {
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
	name := func(e engine.Engine) string { return e.(interface{ KVSharedTier() string }).KVSharedTier() }
	if n0, n1, n2 := name(ws[0]), name(ws[1]), name(ws[2]); n0 == "" || n0 != n1 || n2 == n0 {
		t.Fatalf("shared disk names %q %q %q: want workers 0 and 1 on one, 2 on another", n0, n1, n2)
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
		t.Fatalf("worker 1's first request for worker 0's prefix: %d cached tokens, want it onboarded from the shared disk", c)
	}
	if c := cached(ws[2], ask); c != 0 {
		t.Fatalf("worker 2, of another disk: %d cached tokens, want 0", c)
	}
	// Without a disk tier there is nothing to share.
	bad := &Config{}
	fs = pflag.NewFlagSet("serve", pflag.ContinueOnError)
	bad.AddFlags(fs)
	if err := fs.Parse([]string{"--kv-offload-host-bytes", "1GiB", "--kv-offload-disk-shared"}); err != nil {
		t.Fatal(err)
	}
	if _, err := bad.tiers.mockerTiers(); err == nil {
		t.Fatal("--kv-offload-disk-shared without a disk tier accepted")
	}
}
