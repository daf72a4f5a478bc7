package blockhash

import (
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

// seqTokens returns n token ids spread over the vocabulary, negatives
// included, the same on every run.
func seqTokens(n int) []int32 {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(i*7919 - 300)
	}
	return toks
}

// TestGoldenVectors pins the scheme. The xxh3 value of token 1 is an external
// fact (Dynamo's tests use it); every other value was computed by the two
// implementations this package replaced (kvindex's and kvcache's, which
// agreed) and is committed so that any change to the scheme fails loudly.
func TestGoldenVectors(t *testing.T) {
	if got := xxh3.HashSeed([]byte{1, 0, 0, 0}, Seed); got != 14426539925402682893 {
		t.Fatalf("xxh3 of token 1 = %d", got)
	}
	tests := []struct {
		name   string
		tokens []int32
		bs     int
		want   []uint64
	}{
		{"one token", []int32{1}, 1, []uint64{14426539925402682893}},
		{"two blocks of 4", []int32{1, 2, 3, 4, 5, 6, 7, 8}, 4, []uint64{14643705804678351452, 4945711292740353085}},
		{"partial block ignored", []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, 4,
			[]uint64{14643705804678351452, 4945711292740353085, 12583592247330656132}},
		{"negative and large ids", []int32{-1, 151935, 0, 7}, 2, []uint64{13117247662103342833, 17938376742793336920}},
		{"int32 extremes", []int32{2147483647, -2147483648, 0, 1}, 4, []uint64{18130369248758082482}},
		{"four blocks of 16", seqTokens(16*4 + 3), 16,
			[]uint64{1092958653652255296, 1738713947264711680, 4195184519031639400, 8705889908229231544}},
		{"shorter than a block", []int32{1, 2, 3}, 4, []uint64{}},
		{"empty", nil, 16, []uint64{}},
		{"block size 0", []int32{1, 2, 3}, 0, nil},
		{"negative block size", []int32{1, 2, 3}, -4, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Blocks(tc.tokens, tc.bs)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			if (got == nil) != (tc.want == nil) {
				t.Fatalf("got nil %v, want nil %v", got == nil, tc.want == nil)
			}
		})
	}
	for _, tc := range []struct {
		name string
		got  uint64
		want uint64
	}{
		{"local 5..8", Local([]int32{5, 6, 7, 8}), 16777012769546811212},
		{"local of nothing", Local(nil), 15128690059815094969},
		{"chain", Chain(14643705804678351452, 16777012769546811212), 4945711292740353085},
		{"chain of zeros", Chain(0, 0), 13277122834585657784},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

func TestAppendContinuesAChain(t *testing.T) {
	toks := seqTokens(16 * 2)
	tests := []struct {
		name   string
		parent uint64
		has    bool
		tokens []int32
		bs     int
		want   []uint64
	}{
		{"continuation of a known prefix", Blocks([]int32{1, 2, 3, 4}, 4)[0], true, []int32{5, 6, 7, 8}, 4, []uint64{4945711292740353085}},
		{"continuation of an engine parent", 12345678901234567890, true, toks, 16, []uint64{4438115726099063151, 5892570549849672213}},
		{"a zero parent is still a parent", 0, true, toks[:16], 16, []uint64{11510253168079391674}},
		{"no parent: the local hash", 99, false, toks[:16], 16, []uint64{1092958653652255296}},
		{"block size 0 appends nothing", 0, false, toks, 0, nil},
	}
	var h Hasher
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := []uint64{7}
			got := h.Append(dst, tc.parent, tc.has, tc.tokens, tc.bs)
			if got[0] != 7 || !slices.Equal(got[1:], tc.want) {
				t.Fatalf("got %v, want [7] + %v", got, tc.want)
			}
		})
	}
}

func TestNextMatchesAppend(t *testing.T) {
	toks := seqTokens(16*5 + 1)
	want := Blocks(toks, 16)
	var h Hasher
	var parent uint64
	for i := range want {
		parent = h.Next(parent, i > 0, toks[i*16:(i+1)*16])
		if parent != want[i] {
			t.Fatalf("block %d: Next %d, Append %d", i, parent, want[i])
		}
	}
}

// A prompt of 4096 tokens in blocks of 16: the router hashes one per
// request, an engine one per admission.
const benchTokens, benchBlock = 4096, 16

func BenchmarkBlocks(b *testing.B) {
	toks := seqTokens(benchTokens)
	b.ReportAllocs()
	b.SetBytes(4 * benchTokens)
	for b.Loop() {
		_ = Blocks(toks, benchBlock)
	}
}

func BenchmarkHasherAppend(b *testing.B) {
	toks := seqTokens(benchTokens)
	var h Hasher
	dst := make([]uint64, 0, benchTokens/benchBlock)
	b.ReportAllocs()
	b.SetBytes(4 * benchTokens)
	for b.Loop() {
		dst = h.Append(dst[:0], 0, false, toks, benchBlock)
	}
}

func BenchmarkHasherNext(b *testing.B) {
	toks := seqTokens(benchBlock)
	var h Hasher
	var parent uint64
	b.ReportAllocs()
	b.SetBytes(4 * benchBlock)
	for b.Loop() {
		parent = h.Next(parent, true, toks)
	}
}
