package kvevents

import (
	"reflect"
	"testing"
)

// Bytes written the way each engine writes them, built field by field in
// the engines' own order with the engines' own integer forms, so the test
// does not depend on a Go msgpack library's choices (sorted keys, compact
// ints) that no engine shares.

// ord is an ordered msgpack map: key, value, key, value...
type ord []any

func engineBytes(t *testing.T, v any) []byte {
	t.Helper()
	var enc func(dst []byte, v any) []byte
	enc = func(dst []byte, v any) []byte {
		switch x := v.(type) {
		case nil:
			return appendNil(dst)
		case bool:
			if x {
				return append(dst, 0xc3)
			}
			return append(dst, 0xc2)
		case float64:
			return appendFloat64(dst, x) // msgspec: always float64 (cb)
		case int:
			return appendInt(dst, int64(x))
		case int64:
			return appendInt(dst, x) // SGLang: signed int64 hashes (d3 / negative fixint)
		case uint64:
			return appendUint(dst, x) // vLLM: a hash ≥ 2^63 is uint64 (cf)
		case string:
			return appendStr(dst, x)
		case []any:
			dst = appendArrayHeader(dst, len(x))
			for _, e := range x {
				dst = enc(dst, e)
			}
			return dst
		case ord:
			if len(x)%2 != 0 {
				t.Fatalf("odd ordered map %v", x)
			}
			dst = appendMapHeader(dst, len(x)/2)
			for _, e := range x {
				dst = enc(dst, e)
			}
			return dst
		}
		t.Fatalf("engineBytes: %T", v)
		return nil
	}
	return enc(nil, v)
}

func TestDecodeAsEnginesWriteThem(t *testing.T) {
	toks := func(n, base int) []any {
		s := make([]any, n)
		for i := range s {
			s[i] = base + i
		}
		return s
	}
	toks32 := func(n, base int) []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(base + i)
		}
		return s
	}
	const big = uint64(15760518052499183552) // from a vLLM v0.26.0 capture (volcano-sh/kthena#1535)
	for _, tc := range []struct {
		name string
		in   any
		want *Batch
	}{{
		// vLLM v0.26+: positional outer EventBatch (array_like=True), inner
		// events tagged maps, "type" first then declaration order, fields
		// without defaults always present (vllm/distributed/kv_events.py).
		name: "vllm map form",
		in: []any{1789095808.8378847, []any{
			ord{"type", "BlockStored", "block_hashes", []any{big}, "parent_block_hash", nil,
				"token_ids", toks(16, 1), "block_size", 16, "lora_id", nil, "medium", "GPU", "lora_name", nil,
				"extra_keys", []any{nil}, "group_idx", 0, "kv_cache_spec_kind", "full_attention",
				"a_field_from_the_future", ord{"x", 1}},
			ord{"type", "BlockRemoved", "block_hashes", []any{big}, "medium", "CPU"},
		}, 0},
		want: &Batch{TS: 1789095808.8378847, DataParallelRank: Int(0), Events: []Event{
			{Type: TypeBlockStored, BlockHashes: []Hash{IntHash(big)}, TokenIDs: toks32(16, 1), BlockSize: 16,
				Medium: "GPU", ExtraKeys: [][]byte{nil}, GroupIdx: Int(0), KVCacheSpecKind: "full_attention"},
			{Type: TypeBlockRemoved, BlockHashes: []Hash{IntHash(big)}, Medium: "CPU"},
		}},
	}, {
		// vLLM ≤ 0.25 (array_like=True tagged events) as array-form
		// look-alikes write it: parent_block_hash 0 for "no parent", the
		// batch without data_parallel_rank, trailing fields of a later
		// version appended (a decoder ignores them).
		name: "vllm array form, parent 0",
		in: []any{1.5, []any{
			[]any{"BlockStored", []any{uint64(7), uint64(8)}, 0, toks(8, 1), 4, nil, "GPU", nil, []any{nil, nil}, 0, "full_attention", nil, nil, "later", ord{"k", 1}},
			[]any{"BlockStored", []any{uint64(9)}, uint64(8), toks(4, 9), 4, nil},
			[]any{"BlockRemoved", []any{uint64(9)}, nil},
			[]any{"AllBlocksCleared"},
		}},
		want: &Batch{TS: 1.5, Events: []Event{
			{Type: TypeBlockStored, BlockHashes: []Hash{IntHash(7), IntHash(8)}, ParentBlockHash: IntHash(0), HasParent: true,
				TokenIDs: toks32(8, 1), BlockSize: 4, Medium: "GPU", ExtraKeys: [][]byte{nil, nil}, GroupIdx: Int(0), KVCacheSpecKind: "full_attention"},
			{Type: TypeBlockStored, BlockHashes: []Hash{IntHash(9)}, ParentBlockHash: IntHash(8), HasParent: true,
				TokenIDs: toks32(4, 9), BlockSize: 4},
			{Type: TypeBlockRemoved, BlockHashes: []Hash{IntHash(9)}},
			{Type: TypeAllBlocksCleared},
		}},
	}, {
		// SGLang (python/sglang/srt/disaggregation/kv_events.py): third
		// batch field attn_dp_rank, signed int64 hashes (first 8 bytes of
		// a SHA-256 chain, hash_str_to_int64), HiCache medium tiers,
		// EAGLE bigram [tok, tok] pairs in token_ids.
		name: "sglang eagle, signed hashes, tiers",
		in: []any{2.25, []any{
			[]any{"BlockStored", []any{int64(-3488128144981237669), int64(5674439469042975057)}, nil,
				[]any{[]any{1, 2}, []any{2, 3}, []any{3, 4}, []any{4, 5}, []any{5, 6}, []any{6, 7}, []any{7, 8}, []any{8, 9}}, 4, nil, "GPU"},
			[]any{"BlockStored", []any{int64(-3488128144981237669)}, nil, toks(4, 1), 4, nil, "CPU_PINNED"},
			ord{"type", "BlockRemoved", "block_hashes", []any{int64(5674439469042975057)}, "medium", "DISK"},
		}, 3},
		want: &Batch{TS: 2.25, DataParallelRank: Int(3), Events: []Event{
			{Type: TypeBlockStored, BlockHashes: []Hash{IntHash(0xcf97adeedb59e05b), IntHash(5674439469042975057)},
				TokenIDs: toks32(8, 1), BlockSize: 4, Medium: "GPU"},
			{Type: TypeBlockStored, BlockHashes: []Hash{IntHash(0xcf97adeedb59e05b)}, TokenIDs: toks32(4, 1), BlockSize: 4, Medium: "CPU_PINNED"},
			{Type: TypeBlockRemoved, BlockHashes: []Hash{IntHash(5674439469042975057)}, Medium: "DISK"},
		}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeBatch(engineBytes(t, tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("decoded\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}
