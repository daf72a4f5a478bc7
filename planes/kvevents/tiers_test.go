package kvevents

import (
	"bytes"
	"testing"

	"github.com/tandemllm/tandem/kvcache"
	"github.com/tandemllm/tandem/tokenid"
)

// TestTierEventBytes drives a cache with a host tier through the engines'
// event recorder and checks the step's payload byte for byte against the
// layout each engine writes for an offload: the pool's BlockRemoved and the
// host tier's BlockStored, whose medium is vLLM's "CPU"
// (vllm/v1/kv_offload/mediums.py) or SGLang's "CPU_PINNED"
// (python/sglang/srt/mem_cache), then the block's onboarding back.
func TestTierEventBytes(t *testing.T) {
	toks := []tokenid.ID{1, 2, 3, 4}
	for _, tc := range []struct {
		name string
		rec  stepRecorder
		want func(hA uint64, hashA any) any
	}{{
		name: "vllm map",
		rec:  stepRecorder{blockSize: 4, format: FormatMap},
		want: func(_ uint64, hA any) any {
			return []any{1.5, []any{
				ord{"type", "BlockStored", "block_hashes", []any{hA}, "parent_block_hash", nil,
					"token_ids", []any{1, 2, 3, 4}, "block_size", 4, "lora_id", nil, "medium", "CPU", "lora_name", nil,
					"extra_keys", []any{nil}, "group_idx", 0, "kv_cache_spec_kind", "full_attention"},
				ord{"type", "BlockRemoved", "block_hashes", []any{hA}, "medium", "GPU", "group_idx", 0},
			}, 0}
		},
	}, {
		name: "vllm array",
		rec:  stepRecorder{blockSize: 4, format: FormatArray},
		want: func(_ uint64, hA any) any {
			return []any{1.5, []any{
				[]any{"BlockStored", []any{hA}, nil, []any{1, 2, 3, 4}, 4, nil, "CPU", nil},
				[]any{"BlockRemoved", []any{hA}, "GPU"},
			}, 0}
		},
	}, {
		name: "sglang",
		rec:  stepRecorder{blockSize: 4, format: FormatArray, sglang: true},
		want: func(_ uint64, hA any) any {
			return []any{1.5, []any{
				[]any{"BlockStored", []any{hA}, nil, []any{1, 2, 3, 4}, 4, nil, "CPU_PINNED"},
				[]any{"BlockRemoved", []any{hA}, "GPU"},
			}, 0}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.rec
			var h kvcache.Hasher = &kvcache.XXH3Hasher{}
			if rec.sglang {
				h = SGLangHasher{}
			}
			c, err := kvcache.New(kvcache.Config{NumBlocks: 2, BlockSize: 4, Hasher: h, Sink: &rec,
				Tiers: kvcache.TierConfig{BlockBytes: 1, HostBytes: 4}})
			if err != nil {
				t.Fatal(err)
			}
			a := &kvcache.Seq{}
			if err := c.Allocate(a, 5); err != nil {
				t.Fatal(err)
			}
			c.Commit(a, append(toks, 9))
			c.Free(a)
			rec.take(1, 0) // the pool's BlockStored
			b := &kvcache.Seq{}
			if err := c.Allocate(b, 8); err != nil { // evicts A's block into the host tier
				t.Fatal(err)
			}
			got := rec.take(1.5, 0)
			ha, _ := a.Hash(0)
			var hA any = ha.Uint64()
			if rec.sglang {
				hA = SGLangHashInt64(ha)
			}
			want := engineBytes(t, tc.want(ha.Uint64(), hA))
			if !bytes.Equal(got, want) {
				t.Fatalf("payload\n%x\nwant\n%x", got, want)
			}
			dec, err := DecodeBatch(got)
			if err != nil {
				t.Fatal(err)
			}
			if tier, ok := kvcache.TierOfMedium(dec.Events[0].Medium); !ok || tier != kvcache.TierG2 {
				t.Fatalf("medium %q decodes to %v", dec.Events[0].Medium, tier)
			}
			c.Free(b)
			// Onboarding announces the block in the pool again.
			s := &kvcache.Seq{}
			n, ob := c.AcquireTiers(s, append(toks, 9)[:4], nil, nil)
			if n != 4 || len(ob) != 1 || ob[0].From != kvcache.TierG2 {
				t.Fatalf("onboarded %d tokens, %+v", n, ob)
			}
			dec, err = DecodeBatch(rec.take(2, 0))
			if err != nil {
				t.Fatal(err)
			}
			last := dec.Events[len(dec.Events)-1]
			if last.Type != TypeBlockStored || last.Medium != "GPU" || last.BlockHashes[0].V != dec.Events[len(dec.Events)-1].BlockHashes[0].V {
				t.Fatalf("after onboarding: %+v", dec.Events)
			}
		})
	}
}
