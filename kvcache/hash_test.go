package kvcache

import (
	"testing"

	"github.com/tandemllm/tandem/blockhash"
	"github.com/tandemllm/tandem/tokenid"
)

// TestXXH3HasherGolden pins the engines' default hash to the values it
// produced before it moved onto package blockhash, and to the router index's
// hashes of the same tokens (blockhash.Blocks), block by block.
func TestXXH3HasherGolden(t *testing.T) {
	toks := make([]tokenid.ID, 16*7+5)
	for i := range toks {
		toks[i] = tokenid.ID(i*7919 - 300)
	}
	var h XXH3Hasher
	tests := []struct {
		name   string
		parent BlockHash
		tokens []tokenid.ID
		want   uint64
	}{
		{"first block", BlockHash{}, toks[:16], 1092958653652255296},
		{"chained onto 99", HashFromUint64(99), toks[16:32], 18063654491453285190},
		{"token 1 alone", BlockHash{}, []tokenid.ID{1}, 14426539925402682893},
	}
	for _, tc := range tests {
		if got := h.Hash(tc.parent, tc.tokens).Uint64(); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	want := blockhash.Blocks(toks, 16)
	if len(want) != 7 {
		t.Fatalf("%d blocks, want 7", len(want))
	}
	var parent BlockHash
	for i, w := range want {
		parent = h.Hash(parent, toks[i*16:(i+1)*16])
		if parent.Uint64() != w {
			t.Fatalf("block %d: kvcache %d, blockhash %d", i, parent.Uint64(), w)
		}
	}
}

func BenchmarkXXH3Hasher(b *testing.B) {
	toks := make([]tokenid.ID, 16)
	for i := range toks {
		toks[i] = tokenid.ID(i*7919 - 300)
	}
	var h XXH3Hasher
	var parent BlockHash
	b.ReportAllocs()
	for b.Loop() {
		parent = h.Hash(parent, toks)
	}
}
