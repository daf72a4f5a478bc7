package model

import (
	"encoding/binary"
	"fmt"
	"math"
)

// RawBlockBytes is the size of one block's K/V in the store's own element
// type, all layers: what CopyBlockOut writes and CopyBlockIn reads.
func (kv *KVStore) RawBlockBytes() int {
	return kv.Layers() * 2 * kv.BlockFloats() * kv.Type.Bytes()
}

// CopyBlockOut appends block b's keys and values, every layer, in the
// store's element type (fp16 halves or fp32, little-endian), to dst. With
// CopyBlockIn it moves a block out of the pool and back bit for bit, which
// is what offloading to host memory or disk needs; KV transfer's fp32 wire
// layout is ReadBlock's.
func (kv *KVStore) CopyBlockOut(dst []byte, b int) []byte {
	bs, hd := kv.BlockSize, kv.HeadDim
	for l := range kv.Layers() {
		for _, v := range []bool{false, true} {
			if kv.Type == KVF16 {
				src := kv.halves(l, v)
				for h := range kv.KVDim / hd {
					off := kv.headBase(h) + b*bs*hd
					for _, x := range src[off : off+bs*hd] {
						dst = binary.LittleEndian.AppendUint16(dst, x)
					}
				}
				continue
			}
			n := kv.BlockFloats()
			for _, x := range kv.floats(l, v)[b*n : (b+1)*n] {
				dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(x))
			}
		}
	}
	return dst
}

// CopyBlockIn stores src, as CopyBlockOut wrote it, into block b.
func (kv *KVStore) CopyBlockIn(src []byte, b int) error {
	if len(src) != kv.RawBlockBytes() {
		return fmt.Errorf("kv store: block of %d bytes, want %d", len(src), kv.RawBlockBytes())
	}
	bs, hd := kv.BlockSize, kv.HeadDim
	for l := range kv.Layers() {
		for _, v := range []bool{false, true} {
			if kv.Type == KVF16 {
				dst := kv.halves(l, v)
				for h := range kv.KVDim / hd {
					off := kv.headBase(h) + b*bs*hd
					for i := range bs * hd {
						dst[off+i] = binary.LittleEndian.Uint16(src[2*i:])
					}
					src = src[2*bs*hd:]
				}
				continue
			}
			n := kv.BlockFloats()
			dst := kv.floats(l, v)[b*n : (b+1)*n]
			for i := range dst {
				dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
			}
			src = src[4*n:]
		}
	}
	return nil
}
