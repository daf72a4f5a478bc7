package kvindex

import (
	"slices"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/tandemllm/tandem/kvcache"
)

// The vectors pin Tandem's hash scheme. Two are external facts (the xxh3
// value of token 1, and agreement with kvcache's independent implementation
// of Dynamo's chain); the others were computed by this package and are
// committed so that any change to the scheme fails loudly: a router and
// engines that disagree on hashes route silently at random.
func TestHashVectors(t *testing.T) {
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
		{"shorter than a block", []int32{1, 2, 3}, 4, []uint64{}},
		{"empty", nil, 16, []uint64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := BlockHashes(tc.tokens, tc.bs)
			if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	if got := LocalHash([]int32{5, 6, 7, 8}); got != 16777012769546811212 {
		t.Fatalf("local hash of 5..8 = %d", got)
	}
	if got := ChainHash(14643705804678351452, 16777012769546811212); got != 4945711292740353085 {
		t.Fatalf("chain = %d", got)
	}
}

func TestHashMatchesKVCache(t *testing.T) {
	var kh kvcache.XXH3Hasher
	toks := make([]int32, 16*7+5)
	for i := range toks {
		toks[i] = int32(i*7919 - 300)
	}
	got := BlockHashes(toks, 16)
	var parent kvcache.BlockHash
	for i, h := range got {
		parent = kh.Hash(parent, toks[i*16:(i+1)*16])
		if parent.Uint64() != h {
			t.Fatalf("block %d: kvindex %d, kvcache %d", i, h, parent.Uint64())
		}
	}
}

func TestHasherAppendContinuesAChain(t *testing.T) {
	toks := []int32{1, 2, 3, 4, 5, 6, 7, 8}
	full := BlockHashes(toks, 4)
	var h Hasher
	tail := h.Append(nil, full[0], true, toks[4:], 4)
	if len(tail) != 1 || tail[0] != full[1] {
		t.Fatalf("continuation %v, want %v", tail, full[1:])
	}
}
