package native

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/native/model"
	"github.com/tandemllm/tandem/kvcache"
)

// TestKVTiersOnboardBitExact: a prefix evicted from the pool to host
// memory or to disk, then onboarded, continues exactly as recomputing it
// does (the tiers hold the pool's own fp16 or fp32 bits), for greedy and
// seeded sampling alike.
func TestKVTiersOnboardBitExact(t *testing.T) { kvTypes(t, testKVTiersOnboardBitExact) }

func testKVTiersOnboardBitExact(t *testing.T, kvt model.KVType) {
	m := tinyModel(t, nil)
	prompt := randPrompt(100, 7, m.Config.Vocab)
	req := engine.Request{Prompt: prompt, MaxTokens: 20, IgnoreEOS: true,
		Sampling: engine.Sampling{Temperature: 0.8, TopK: 40, Seed: 9, HasSeed: true}}
	want := gen(t, newEngine(t, m, Options{DisablePrefixCaching: true, KVType: kvt}), req)
	for _, tc := range []struct {
		name       string
		host, disk int64
		from       kvcache.Tier
	}{
		{"host", 64 << 20, 0, kvcache.TierG2},
		{"disk", 0, 64 << 20, kvcache.TierG3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, m, Options{KVType: kvt, ContextLength: 128, KVBytes: 1,
				KVOffloadHostBytes: tc.host, KVOffloadDiskBytes: tc.disk, KVOffloadDiskDir: t.TempDir()})
			if got := gen(t, e, req); !slices.Equal(got.tokens, want.tokens) {
				t.Fatalf("first run %v, want %v", got.tokens, want.tokens)
			}
			evict(t, e, m)
			got := gen(t, e, req)
			if got.cached != 96 || !slices.Equal(got.tokens, want.tokens) {
				t.Fatalf("after onboarding: cached %d, tokens %v, want 96 and %v", got.cached, got.tokens, want.tokens)
			}
			st, err := e.TierStats(t.Context())
			if err != nil || st.Onboarded[tc.from] == 0 {
				t.Fatalf("tier stats %+v (%v): nothing onboarded from %v", st, err, tc.from)
			}
		})
	}
}

// evict runs other prompts through e until none of the pool's blocks
// holds the first prompt any more.
func evict(t *testing.T, e *Engine, m *model.Model) {
	t.Helper()
	for i := range 3 {
		gen(t, e, engine.Request{Prompt: randPrompt(100, uint64(100+i), m.Config.Vocab), MaxTokens: 1})
	}
}

// TestKVDiskTierCorruptAndCleanup: a disk tier file whose bytes changed is
// caught by its checksum and the block recomputed, with the same output;
// the files stay within the tier's size; Close removes them.
func TestKVDiskTierCorruptAndCleanup(t *testing.T) {
	m := tinyModel(t, nil)
	prompt := randPrompt(100, 7, m.Config.Vocab)
	req := engine.Request{Prompt: prompt, MaxTokens: 10, IgnoreEOS: true}
	want := gen(t, newEngine(t, m, Options{DisablePrefixCaching: true, KVType: model.KVF16}), req)
	parent := t.TempDir()
	e, err := New(m, Options{Threads: 2, KVType: model.KVF16, ContextLength: 128, KVBytes: 1, KVOffloadDiskDir: parent,
		KVOffloadDiskBytes: 12 * int64(e16BlockBytes(t, m)+tierHeaderSize)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	gen(t, e, req)
	evict(t, e, m)
	// Wait for the writer to land the files.
	files := func() []string {
		fs, _ := filepath.Glob(filepath.Join(parent, "tandem-kv-*", "*.kv"))
		return fs
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.tiers.mu.Lock()
		n := len(e.tiers.pending)
		e.tiers.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	fs := files()
	if len(fs) == 0 || len(fs) > 12 {
		t.Fatalf("%d disk tier files, want 1 to 12 (the tier's size)", len(fs))
	}
	// Damage every file: whichever block the prompt needs first is caught.
	for _, f := range fs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-1] ^= 0x40
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got := gen(t, e, req)
	if got.cached != 0 || !slices.Equal(got.tokens, want.tokens) {
		t.Fatalf("after corruption: cached %d, tokens %v, want 0 and %v", got.cached, got.tokens, want.tokens)
	}
	st, err := e.TierStats(t.Context())
	if err != nil || st.LoadErr == 0 || e.tiers.readErrs.Load() == 0 {
		t.Fatalf("corruption not detected: %+v, read errors %d (%v)", st, e.tiers.readErrs.Load(), err)
	}
	e.Close()
	if left, _ := filepath.Glob(filepath.Join(parent, "*")); len(left) != 0 {
		t.Fatalf("left after Close: %v", left)
	}
}

func e16BlockBytes(t *testing.T, m *model.Model) int {
	kv, err := model.NewKVStoreOf(&m.Config, 16, 1, model.KVF16)
	if err != nil {
		t.Fatal(err)
	}
	return kv.RawBlockBytes()
}

// TestKVSharedDiskTier: two workers share one disk tier directory; a
// prefix worker A computed and evicted to it is onboarded by worker B on
// B's first request for it (cached tokens > 0), with A's exact output.
// Each removes only its own files at Close.
func TestKVSharedDiskTier(t *testing.T) {
	m := tinyModel(t, nil)
	dir := t.TempDir()
	opts := Options{Threads: 2, KVType: model.KVF16, ContextLength: 128, KVBytes: 1,
		KVOffloadDiskBytes: 64 << 20, KVOffloadDiskDir: dir, KVOffloadDiskShared: true}
	a := newEngine(t, m, opts)
	b := newEngine(t, m, opts)
	if na, nb := a.KVSharedTier(), b.KVSharedTier(); na == "" || na != nb {
		t.Fatalf("shared tier names %q and %q: want one, not empty", na, nb)
	}
	prompt := randPrompt(100, 7, m.Config.Vocab)
	req := engine.Request{Prompt: prompt, MaxTokens: 12, IgnoreEOS: true}
	want := gen(t, a, req)
	evict(t, a, m)
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.tiers.mu.Lock()
		n := len(a.tiers.pending)
		a.tiers.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	got := gen(t, b, req)
	if got.cached == 0 || !slices.Equal(got.tokens, want.tokens) {
		t.Fatalf("worker B: cached %d, tokens %v, want > 0 and %v", got.cached, got.tokens, want.tokens)
	}
	st, err := b.TierStats(t.Context())
	if err != nil || st.SharedOnboarded == 0 {
		t.Fatalf("B's tier stats %+v (%v): nothing onboarded from the shared tier", st, err)
	}
	b.Close()
	if fs, _ := filepath.Glob(filepath.Join(dir, "*.kv")); len(fs) == 0 {
		t.Fatal("B's Close removed A's files")
	}
	a.Close()
	if fs, _ := filepath.Glob(filepath.Join(dir, "*")); len(fs) != 0 {
		t.Fatalf("left after both closed: %v", fs)
	}
}
