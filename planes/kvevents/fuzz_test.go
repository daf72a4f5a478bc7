package kvevents

import (
	"bytes"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// randomBatch builds a batch exercising every field and integer width.
func randomBatch(seed uint64) *Batch {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	ints := []int64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64}
	anyInt := func() int64 {
		if rng.IntN(3) == 0 {
			return int64(rng.Uint64())
		}
		return ints[rng.IntN(len(ints))]
	}
	optInt := func() OptInt {
		if rng.IntN(2) == 0 {
			return OptInt{}
		}
		return Int(anyInt())
	}
	strs := []string{"", "GPU", "CPU", "x", "full_attention", "a string that is longer than thirty-one bytes", string(make([]byte, 300))}
	str := func() string { return strs[rng.IntN(len(strs))] }
	hash := func() Hash {
		if rng.IntN(3) == 0 {
			b := make([]byte, []int{8, 16, 32}[rng.IntN(3)])
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			return BytesHash(b)
		}
		return IntHash(rng.Uint64() >> (rng.IntN(64)))
	}
	b := &Batch{TS: rng.Float64() * 2e9}
	if rng.IntN(2) == 0 {
		b.DataParallelRank = Int(int64(rng.IntN(1000)))
	}
	for range rng.IntN(20) {
		var e Event
		switch rng.IntN(3) {
		case 0:
			e.Type = TypeBlockStored
			n := 1 + rng.IntN(3)
			bs := 1 + rng.IntN(20)
			for range n {
				e.BlockHashes = append(e.BlockHashes, hash())
			}
			if rng.IntN(2) == 0 {
				e.ParentBlockHash, e.HasParent = hash(), true
			}
			for range n * bs {
				e.TokenIDs = append(e.TokenIDs, int32(anyInt()))
			}
			e.BlockSize = bs
			e.LoRAID = optInt()
			e.Medium, e.LoRAName = str(), str()
			if rng.IntN(2) == 0 {
				e.ExtraKeys = make([][]byte, n)
				for i := range e.ExtraKeys {
					if rng.IntN(2) == 0 {
						e.ExtraKeys[i] = []byte{0x92, 0xa4, 'l', 'o', 'r', 'a', 0x05} // ("lora", 5)
					}
				}
			}
			e.GroupIdx, e.KVCacheSpecKind, e.KVCacheSpecSlidingWindow, e.Locality = optInt(), str(), optInt(), str()
		case 1:
			e.Type = TypeBlockRemoved
			for range 1 + rng.IntN(3) {
				e.BlockHashes = append(e.BlockHashes, hash())
			}
			e.Medium, e.GroupIdx, e.Locality = str(), optInt(), str()
		default:
			e.Type = TypeAllBlocksCleared
		}
		b.Events = append(b.Events, e)
	}
	return b
}

// sameBatch compares two batches, treating NaN timestamps by bit pattern
// and ignoring the decoder-only Skipped counter.
func sameBatch(a, b *Batch) bool {
	if math.Float64bits(a.TS) != math.Float64bits(b.TS) || a.DataParallelRank != b.DataParallelRank ||
		len(a.Events) != len(b.Events) {
		return false
	}
	for i := range a.Events {
		x, y := a.Events[i], b.Events[i]
		if len(x.ExtraKeys) == 0 && len(y.ExtraKeys) == 0 && (x.ExtraKeys == nil) == (y.ExtraKeys == nil) {
			x.ExtraKeys, y.ExtraKeys = nil, nil
		}
		if !reflect.DeepEqual(normHashes(x), normHashes(y)) {
			return false
		}
	}
	return true
}

// normHashes maps empty-but-present slices to nil so arena slicing details
// do not matter to comparisons.
func normHashes(e Event) Event {
	if len(e.BlockHashes) == 0 {
		e.BlockHashes = nil
	}
	if len(e.TokenIDs) == 0 {
		e.TokenIDs = nil
	}
	return e
}

func TestRandomRoundTrip(t *testing.T) {
	for seed := range uint64(300) {
		want := randomBatch(seed)
		for _, f := range []Format{FormatMap, FormatArray} {
			payload := EncodeBatch(want, f)
			got, err := DecodeBatch(payload)
			if err != nil {
				t.Fatalf("seed %d %v: %v\n%x", seed, f, err, payload)
			}
			if !sameBatch(want, got) {
				t.Fatalf("seed %d %v: round trip differs\nwant %+v\n got %+v", seed, f, want, got)
			}
			// The reference implementation must accept our bytes whole.
			dec := msgpack.NewDecoder(bytes.NewReader(payload))
			if _, err := dec.DecodeInterface(); err != nil {
				t.Fatalf("seed %d %v: reference decoder: %v", seed, f, err)
			}
			if dec.Buffered().(*bytes.Reader).Len() != 0 {
				t.Fatalf("seed %d %v: reference decoder left bytes", seed, f)
			}
		}
	}
}

// FuzzRoundTrip: random batches survive encode→decode in both formats.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []uint64{0, 1, 42, 1 << 40} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		want := randomBatch(seed)
		for _, format := range []Format{FormatMap, FormatArray} {
			got, err := DecodeBatch(EncodeBatch(want, format))
			if err != nil {
				t.Fatal(err)
			}
			if !sameBatch(want, got) {
				t.Fatalf("round trip differs for seed %d", seed)
			}
		}
	})
}

// FuzzDecode: arbitrary bytes never panic, and whatever decodes re-encodes
// to bytes that decode to the same batch (the decoder's normalization is
// idempotent).
func FuzzDecode(f *testing.F) {
	for _, v := range []string{vectorA, vectorB, vectorD} {
		b, _ := hex.DecodeString(v)
		f.Add(b)
	}
	f.Add([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90})
	f.Add(EncodeBatch(randomBatch(7), FormatArray))
	f.Fuzz(func(t *testing.T, data []byte) {
		first, err := DecodeBatch(data)
		if err != nil {
			return
		}
		for _, format := range []Format{FormatMap, FormatArray} {
			again, err := DecodeBatch(EncodeBatch(first, format))
			if err != nil {
				t.Fatalf("re-encoded batch does not decode: %v", err)
			}
			if !sameBatch(first, again) {
				t.Fatalf("%v: normalization not idempotent\nfirst %+v\nagain %+v", format, first, again)
			}
		}
	})
}
