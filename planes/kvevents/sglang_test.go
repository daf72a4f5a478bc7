package kvevents

import (
	"bytes"
	"testing"

	"github.com/tandemllm/tandem/kvcache"
	"github.com/tandemllm/tandem/tokenid"
)

// TestSGLangEngineEvents: an engine publishing as SGLang does writes the
// page chain's signed int64 hashes (wire-formats: [1,2,3,4] →
// -3488128144981237669, then [5,6,7,8] → 5674439469042975057), positional
// events whose BlockStored ends at medium, and attn_dp_rank third; the
// shared decoder reads them back.
func TestSGLangEngineEvents(t *testing.T) {
	rec := stepRecorder{blockSize: 4, format: FormatArray, sglang: true}
	var h SGLangHasher
	toks := []tokenid.ID{1, 2, 3, 4, 5, 6, 7, 8}
	b0 := h.Hash(kvcache.BlockHash{}, toks[:4])
	b1 := h.Hash(b0, toks[4:])
	if got := SGLangHashInt64(b0); got != -3488128144981237669 {
		t.Fatalf("first page: %d", got)
	}
	if got := SGLangHashInt64(b1); got != 5674439469042975057 {
		t.Fatalf("second page: %d", got)
	}
	rec.BlocksStored(kvcache.BlockHash{}, []kvcache.BlockHash{b0}, toks[:4])
	rec.BlocksStored(b0, []kvcache.BlockHash{b1}, toks[4:])
	rec.BlocksRemoved([]kvcache.BlockHash{b1})
	payload := rec.take(1.5, 3)
	// -3488128144981237669 as msgpack int64: d3 then 8 bytes big-endian.
	if !bytes.Contains(payload, []byte{0xd3, 0xcf, 0x97, 0xad, 0xee, 0xdb, 0x59, 0xe0, 0x5b}) {
		t.Fatalf("no signed int64 hash in % x", payload)
	}
	b, err := DecodeBatch(payload)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 3 || !b.DataParallelRank.Valid || b.DataParallelRank.V != 3 {
		t.Fatalf("batch %+v", b)
	}
	st := b.Events[1]
	if st.Type != TypeBlockStored || !st.HasParent || int64(st.ParentBlockHash.V) != -3488128144981237669 ||
		int64(st.BlockHashes[0].V) != 5674439469042975057 || st.Medium != "GPU" || len(st.TokenIDs) != 4 {
		t.Fatalf("stored %+v", st)
	}
	if b.Events[0].HasParent {
		t.Fatal("the root page has a parent")
	}
	if rm := b.Events[2]; rm.Type != TypeBlockRemoved || rm.BlockHashes[0].V != st.BlockHashes[0].V {
		t.Fatalf("removed %+v", rm)
	}
}
