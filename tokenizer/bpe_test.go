package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/tokenid"
)

// mergeBoth runs the linear-scan and the heap merge on the same word.
func mergeBoth(b *byteLevel, w string) (scan, heap []tokenid.ID) {
	run := func(f func(*merger, string, []bpeSym)) []tokenid.ID {
		syms := make([]bpeSym, len(w))
		for i := range syms {
			syms[i] = bpeSym{start: int32(i), end: int32(i + 1), id: b.byteTok[w[i]], prev: int32(i - 1), next: int32(i + 1)}
		}
		syms[len(syms)-1].next = -1
		for i := 0; i+1 < len(syms); i++ {
			syms[i].rank, syms[i].mergeID = b.m.pair(w, &syms[i], &syms[i+1])
		}
		syms[len(syms)-1].rank = noRank
		f(&b.m, w, syms)
		var out []tokenid.ID
		for i := int32(0); i >= 0; i = syms[i].next {
			out = append(out, syms[i].id)
		}
		return out
	}
	return run((*merger).mergeScan), run((*merger).mergeHeap)
}

func TestMergeScanEqualsHeap(t *testing.T) {
	tok := testDefault(t).Tokenizer.(*byteLevel)
	rng := rand.New(rand.NewPCG(5, 6))
	words := []string{"ab", "aaaaaaaaaaaaaaaa", "internationalization", "Supercalifragilisticexpialidocious", "=================", "中文分词测试"}
	for i := 0; i < 200; i++ {
		var sb strings.Builder
		for j := 0; j < 2+rng.IntN(60); j++ {
			sb.WriteByte("aaabcdeilnorst=_"[rng.IntN(16)])
		}
		words = append(words, sb.String())
	}
	for _, w := range words {
		scan, heap := mergeBoth(tok, w)
		if !slices.Equal(scan, heap) {
			t.Fatalf("merge(%q): scan %v heap %v", w, scan, heap)
		}
		if tok.Decode(scan) != w {
			t.Fatalf("merge(%q) does not decode back", w)
		}
	}
}

func TestEncodeLongWordsFast(t *testing.T) {
	tok := testDefault(t).Tokenizer
	for _, s := range []string{strings.Repeat("a", 100_000), strings.Repeat("ab=", 30_000), strings.Repeat(" ", 100_000) + "x"} {
		start := time.Now()
		ids := tok.Encode(s)
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Encode of %d bytes took %v", len(s), d)
		}
		if tok.Decode(ids) != s {
			t.Errorf("round trip failed for %d bytes", len(s))
		}
	}
	t.Run("sentencepiece", func(t *testing.T) {
		sp := testStories(t)
		s := strings.Repeat("Once upon a time there was a cat. ", 2000)
		start := time.Now()
		ids := sp.Encode(s)
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("SentencePiece Encode of %d bytes took %v", len(s), d)
		}
		if got := sp.Decode(ids); got != " "+s {
			t.Errorf("SentencePiece round trip failed")
		}
	})
}
