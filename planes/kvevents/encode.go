package kvevents

import (
	"encoding/binary"
	"math"
)

// The encoder mirrors msgspec.msgpack.Encoder() with vLLM's struct options:
// integers in their smallest form, floats always float64, structs with
// array_like=True as positional arrays whose trailing default fields are
// dropped, other structs as maps with "type" first and every default-valued
// field dropped. Only fields without a default in vLLM's declaration (through
// lora_name for BlockStored, through medium for BlockRemoved) are always
// written.

// EncodeBatch returns the msgpack payload of b.
func EncodeBatch(b *Batch, f Format) []byte {
	return AppendBatch(make([]byte, 0, 64+len(b.Events)*160), b, f)
}

// AppendBatch appends the msgpack payload of b to dst. Events of unknown
// type are left out.
func AppendBatch(dst []byte, b *Batch, f Format) []byte {
	n := 2
	if b.DataParallelRank.Valid {
		n = 3
	}
	dst = appendArrayHeader(dst, n)
	dst = appendFloat64(dst, b.TS)
	events := 0
	for i := range b.Events {
		if b.Events[i].Type != TypeUnknown {
			events++
		}
	}
	dst = appendArrayHeader(dst, events)
	if b.SignedHashes {
		f |= signedHashes
	}
	for i := range b.Events {
		dst = AppendEvent(dst, &b.Events[i], f)
	}
	if b.DataParallelRank.Valid {
		dst = appendInt(dst, b.DataParallelRank.V)
	}
	return dst
}

// AppendEvent appends one event; an event of unknown type appends nothing.
func AppendEvent(dst []byte, e *Event, f Format) []byte {
	if e.Type == TypeAllBlocksCleared {
		f &^= signedHashes
	}
	switch e.Type {
	case TypeBlockStored:
		return appendBlockStored(dst, e, f)
	case TypeBlockRemoved:
		return appendBlockRemoved(dst, e, f)
	case TypeAllBlocksCleared:
		if f == FormatArray {
			dst = appendArrayHeader(dst, 1)
		} else {
			dst = appendMapHeader(dst, 1)
			dst = appendStr(dst, "type")
		}
		return appendStr(dst, "AllBlocksCleared")
	}
	return dst
}

// signedHashes is a Format bit, set by AppendBatch for Batch.SignedHashes:
// SGLang's shapes — integer hashes written as signed int64s, and an array
// BlockStored that ends at medium (sglang/srt/disaggregation/kv_events.py
// declares no lora_name).
const signedHashes Format = 0x80

// Optional trailing fields of BlockStored, in declaration order.
const (
	bsExtraKeys = iota
	bsGroupIdx
	bsSpecKind
	bsSliding
	bsLocality
	bsNumOptional
)

func storedOptionalPresent(e *Event) [bsNumOptional]bool {
	return [bsNumOptional]bool{
		bsExtraKeys: e.ExtraKeys != nil,
		bsGroupIdx:  e.GroupIdx.Valid,
		bsSpecKind:  e.KVCacheSpecKind != "",
		bsSliding:   e.KVCacheSpecSlidingWindow.Valid,
		bsLocality:  e.Locality != "",
	}
}

var storedOptionalKeys = [bsNumOptional]string{
	"extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window", "locality",
}

func appendStoredOptional(dst []byte, e *Event, i int) []byte {
	switch i {
	case bsExtraKeys:
		if e.ExtraKeys == nil {
			return appendNil(dst)
		}
		dst = appendArrayHeader(dst, len(e.ExtraKeys))
		for _, k := range e.ExtraKeys {
			if k == nil {
				dst = appendNil(dst)
			} else {
				dst = append(dst, k...)
			}
		}
		return dst
	case bsGroupIdx:
		return appendOptInt(dst, e.GroupIdx)
	case bsSpecKind:
		return appendOptStr(dst, e.KVCacheSpecKind)
	case bsSliding:
		return appendOptInt(dst, e.KVCacheSpecSlidingWindow)
	default:
		return appendOptStr(dst, e.Locality)
	}
}

func appendBlockStored(dst []byte, e *Event, f Format) []byte {
	signed := f&signedHashes != 0
	f &^= signedHashes
	present := storedOptionalPresent(e)
	if f == FormatArray {
		last := -1
		for i, p := range present {
			if p {
				last = i
			}
		}
		n := 8 + last + 1
		if signed && last < 0 {
			n = 7 // SGLang's BlockStored ends at medium: no lora_name
		}
		dst = appendArrayHeader(dst, n)
		dst = appendStr(dst, "BlockStored")
		dst = appendHashes(dst, e.BlockHashes, signed)
		dst = appendParent(dst, e, signed)
		dst = appendTokens(dst, e.TokenIDs)
		dst = appendInt(dst, int64(e.BlockSize))
		dst = appendOptInt(dst, e.LoRAID)
		dst = appendOptStr(dst, e.Medium)
		if n == 7 {
			return dst
		}
		dst = appendOptStr(dst, e.LoRAName)
		for i := 0; i <= last; i++ {
			dst = appendStoredOptional(dst, e, i)
		}
		return dst
	}
	n := 8
	for _, p := range present {
		if p {
			n++
		}
	}
	dst = appendMapHeader(dst, n)
	dst = appendStr(dst, "type")
	dst = appendStr(dst, "BlockStored")
	dst = appendStr(dst, "block_hashes")
	dst = appendHashes(dst, e.BlockHashes, signed)
	dst = appendStr(dst, "parent_block_hash")
	dst = appendParent(dst, e, signed)
	dst = appendStr(dst, "token_ids")
	dst = appendTokens(dst, e.TokenIDs)
	dst = appendStr(dst, "block_size")
	dst = appendInt(dst, int64(e.BlockSize))
	dst = appendStr(dst, "lora_id")
	dst = appendOptInt(dst, e.LoRAID)
	dst = appendStr(dst, "medium")
	dst = appendOptStr(dst, e.Medium)
	dst = appendStr(dst, "lora_name")
	dst = appendOptStr(dst, e.LoRAName)
	for i, p := range present {
		if p {
			dst = appendStr(dst, storedOptionalKeys[i])
			dst = appendStoredOptional(dst, e, i)
		}
	}
	return dst
}

func appendBlockRemoved(dst []byte, e *Event, f Format) []byte {
	signed := f&signedHashes != 0
	f &^= signedHashes
	if f == FormatArray {
		n := 3
		if e.Locality != "" {
			n = 5
		} else if e.GroupIdx.Valid {
			n = 4
		}
		dst = appendArrayHeader(dst, n)
		dst = appendStr(dst, "BlockRemoved")
		dst = appendHashes(dst, e.BlockHashes, signed)
		dst = appendOptStr(dst, e.Medium)
		if n > 3 {
			dst = appendOptInt(dst, e.GroupIdx)
		}
		if n > 4 {
			dst = appendOptStr(dst, e.Locality)
		}
		return dst
	}
	n := 3
	if e.GroupIdx.Valid {
		n++
	}
	if e.Locality != "" {
		n++
	}
	dst = appendMapHeader(dst, n)
	dst = appendStr(dst, "type")
	dst = appendStr(dst, "BlockRemoved")
	dst = appendStr(dst, "block_hashes")
	dst = appendHashes(dst, e.BlockHashes, signed)
	dst = appendStr(dst, "medium")
	dst = appendOptStr(dst, e.Medium)
	if e.GroupIdx.Valid {
		dst = appendStr(dst, "group_idx")
		dst = appendInt(dst, e.GroupIdx.V)
	}
	if e.Locality != "" {
		dst = appendStr(dst, "locality")
		dst = appendStr(dst, e.Locality)
	}
	return dst
}

func appendParent(dst []byte, e *Event, signed bool) []byte {
	if !e.HasParent {
		return appendNil(dst)
	}
	return appendHash(dst, e.ParentBlockHash, signed)
}

func appendHashes(dst []byte, hs []Hash, signed bool) []byte {
	dst = appendArrayHeader(dst, len(hs))
	for _, h := range hs {
		dst = appendHash(dst, h, signed)
	}
	return dst
}

func appendHash(dst []byte, h Hash, signed bool) []byte {
	if h.Bytes != nil {
		return appendBin(dst, h.Bytes)
	}
	if signed {
		return appendInt(dst, int64(h.V))
	}
	return appendUint(dst, h.V)
}

func appendTokens(dst []byte, ts []int32) []byte {
	dst = appendArrayHeader(dst, len(ts))
	for _, t := range ts {
		if t >= 0 && t < 0x80 {
			dst = append(dst, byte(t))
			continue
		}
		dst = appendInt(dst, int64(t))
	}
	return dst
}

func appendOptInt(dst []byte, v OptInt) []byte {
	if !v.Valid {
		return appendNil(dst)
	}
	return appendInt(dst, v.V)
}

func appendOptStr(dst []byte, s string) []byte {
	if s == "" {
		return appendNil(dst)
	}
	return appendStr(dst, s)
}

func appendNil(dst []byte) []byte { return append(dst, 0xc0) }

func appendFloat64(dst []byte, f float64) []byte {
	dst = append(dst, 0xcb)
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(f))
}

func appendUint(dst []byte, v uint64) []byte {
	switch {
	case v < 0x80:
		return append(dst, byte(v))
	case v <= math.MaxUint8:
		return append(dst, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xcf), v)
}

func appendInt(dst []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(dst, uint64(v))
	case v >= -32:
		return append(dst, byte(int8(v)))
	case v >= math.MinInt8:
		return append(dst, 0xd0, byte(int8(v)))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(dst, 0xd1), uint16(int16(v)))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(dst, 0xd2), uint32(int32(v)))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xd3), uint64(v))
}

func appendStr(dst []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		dst = append(dst, 0xa0|byte(n))
	case n <= math.MaxUint8:
		dst = append(dst, 0xd9, byte(n))
	case n <= math.MaxUint16:
		dst = binary.BigEndian.AppendUint16(append(dst, 0xda), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xdb), uint32(n))
	}
	return append(dst, s...)
}

func appendBin(dst []byte, b []byte) []byte {
	n := len(b)
	switch {
	case n <= math.MaxUint8:
		dst = append(dst, 0xc4, byte(n))
	case n <= math.MaxUint16:
		dst = binary.BigEndian.AppendUint16(append(dst, 0xc5), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xc6), uint32(n))
	}
	return append(dst, b...)
}

func appendArrayHeader(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdd), uint32(n))
}

func appendMapHeader(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdf), uint32(n))
}
