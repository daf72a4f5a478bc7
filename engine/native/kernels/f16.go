package kernels

// Half-precision rows, for the KV cache's fp16 storage (model.KVF16): keys
// and values are stored as IEEE halves, as llama.cpp's default F16 cache
// keeps them, and widened to fp32 a block at a time just before the
// attention kernels read them. Widening is exact, so every attention
// product is the fp32 one on the stored (rounded) values, in the same
// order, and batched and single-token results stay bitwise equal.

// F16ToF32Rows widens rows×width halves into dst: row i of the source starts
// at src[i*sstride], row i of dst at dst[i*dstride]. Values are exact; an
// infinity or NaN half (never written from a finite value below 65520, see
// F32ToF16Row) is only guaranteed to stay non-finite on the portable path.
func F16ToF32Rows(dst []float32, dstride int, src []uint16, sstride, rows, width int) {
	if rows <= 0 || width <= 0 {
		return
	}
	_, _ = dst[(rows-1)*dstride+width-1], src[(rows-1)*sstride+width-1]
	f16Rows(dst, dstride, src, sstride, rows, width)
}

func f16RowsPortable(dst []float32, dstride int, src []uint16, sstride, rows, width int) {
	for i := range rows {
		d, s := dst[i*dstride:i*dstride+width], src[i*sstride:i*sstride+width]
		for j, h := range s {
			d[j] = F16ToF32(h)
		}
	}
}

// F32ToF16Row narrows src into dst (len(dst) ≥ len(src)) with F32ToF16:
// round to nearest even; magnitudes from 65520 up become infinities.
func F32ToF16Row(dst []uint16, src []float32) { f32ToF16Row(dst[:len(src)], src) }

func f32ToF16RowPortable(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = F32ToF16(f)
	}
}
