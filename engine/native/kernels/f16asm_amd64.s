//go:build goexperiment.simd && amd64

#include "textflag.h"
#include "hsum_amd64.h"

// One-token F16 product of the AVX-512 level in assembly (f16asm_amd64.go
// says why). Every output is reduced exactly as f32Tile4x1 + st4x16
// (simd512_amd64.go) reduce the widened row:
//
//   for each 16 columns in order:
//     acc = fma(float(w[16]), x[16], acc)     one 16-lane accumulator per row
//   then lanes j+8 onto j, j+4 onto j, pairs, pair sums (fold16 + hsum4).
//
// VCVTPH2PS widens exactly (every half is an fp32), as F16ToF32Rows does
// for finite halves.


// func f16Dot4(out *float32, w0, w1, w2, w3 *uint16, x *float32, n16, tiles, stride int)
//
// tiles times: out[0..3] = rows w0..w3 (n16·16 halves each) · x, then out
// += 4 floats and every row pointer += 4·stride bytes (stride: one row). AX, the prefetch
// pointer, runs through the weights a tile (4·stride bytes) ahead of w0,
// 128 bytes (the 4 rows' share of one step) per step, so by the end of a
// tile the next tile's bytes have all been asked for whatever the row
// length. A prefetch never faults, so those past the matrix are harmless.
TEXT ·f16Dot4(SB), NOSPLIT, $0-72
	MOVQ out+0(FP), DI
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ w2+24(FP), R10
	MOVQ w3+32(FP), R11
	MOVQ x+40(FP), SI
	MOVQ n16+48(FP), R12
	MOVQ tiles+56(FP), R13
	MOVQ stride+64(FP), R14
	TESTQ R13, R13
	JLE   done
	LEAQ  (R8)(R14*4), AX
	SHLQ  $5, R12 // bytes of halves per row

tile:
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	XORQ   DX, DX

step:
	VMOVUPS     (SI)(DX*2), Z4
	VCVTPH2PS   (R8)(DX*1), Z0
	VCVTPH2PS   (R9)(DX*1), Z1
	VCVTPH2PS   (R10)(DX*1), Z2
	VCVTPH2PS   (R11)(DX*1), Z3
	PREFETCHT0  (AX)
	PREFETCHT0  64(AX)
	VFMADD231PS Z4, Z0, Z8
	VFMADD231PS Z4, Z1, Z9
	VFMADD231PS Z4, Z2, Z10
	VFMADD231PS Z4, Z3, Z11
	ADDQ        $128, AX
	ADDQ        $32, DX
	CMPQ        DX, R12
	JLT         step

	FOLD16(Z8, Y8, X8)
	FOLD16(Z9, Y9, X9)
	FOLD16(Z10, Y10, X10)
	FOLD16(Z11, Y11, X11)
	HSUM4(X8, X9, X10, X11)
	VMOVUPS X8, (DI)
	ADDQ    $16, DI
	LEAQ    (R8)(R14*4), R8
	LEAQ    (R9)(R14*4), R9
	LEAQ    (R10)(R14*4), R10
	LEAQ    (R11)(R14*4), R11
	DECQ    R13
	JNZ     tile

done:
	VZEROUPPER
	RET

// func f16Dot8(out *float32, w *uint16, x *float32, n16, tiles, stride int)
//
// f16Dot4 for eight consecutive rows per tile (w + k·stride bytes, k < 8),
// tiles times, out += 8 floats and w += 8·stride bytes per tile.
TEXT ·f16Dot8(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), R8
	MOVQ n16+24(FP), R12
	MOVQ tiles+32(FP), R13
	MOVQ stride+40(FP), R14
	TESTQ R13, R13
	JLE   done8
	LEAQ  (R8)(R14*8), AX

tile8:
	MOVQ   x+16(FP), SI
	LEAQ   (R8)(R14*2), R9
	ADDQ   R14, R9          // row 3
	LEAQ   (R9)(R14*2), R10
	ADDQ   R14, R10         // row 6
	MOVQ   R8, R15          // row 0 of the next tile - 8·stride
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	MOVQ   R12, CX

step8:
	VMOVUPS     (SI), Z24
	VCVTPH2PS   (R8), Z16
	VCVTPH2PS   (R8)(R14*1), Z17
	VCVTPH2PS   (R8)(R14*2), Z18
	VCVTPH2PS   (R9), Z19
	VCVTPH2PS   (R9)(R14*1), Z20
	VCVTPH2PS   (R9)(R14*2), Z21
	VCVTPH2PS   (R10), Z22
	VCVTPH2PS   (R9)(R14*4), Z23
	PREFETCHT0  (AX)
	PREFETCHT0  64(AX)
	PREFETCHT0  128(AX)
	PREFETCHT0  192(AX)
	VFMADD231PS Z24, Z16, Z8
	VFMADD231PS Z24, Z17, Z9
	VFMADD231PS Z24, Z18, Z10
	VFMADD231PS Z24, Z19, Z11
	VFMADD231PS Z24, Z20, Z12
	VFMADD231PS Z24, Z21, Z13
	VFMADD231PS Z24, Z22, Z14
	VFMADD231PS Z24, Z23, Z15
	ADDQ        $256, AX
	ADDQ        $64, SI
	ADDQ        $32, R8
	ADDQ        $32, R9
	ADDQ        $32, R10
	DECQ        CX
	JNZ         step8

	FOLD16(Z8, Y8, X8)
	FOLD16(Z9, Y9, X9)
	FOLD16(Z10, Y10, X10)
	FOLD16(Z11, Y11, X11)
	FOLD16(Z12, Y12, X12)
	FOLD16(Z13, Y13, X13)
	FOLD16(Z14, Y14, X14)
	FOLD16(Z15, Y15, X15)
	HSUM4(X8, X9, X10, X11)
	HSUM4(X12, X13, X14, X15)
	VMOVUPS X8, (DI)
	VMOVUPS X12, 16(DI)
	ADDQ    $32, DI
	LEAQ    (R15)(R14*8), R8
	DECQ    R13
	JNZ     tile8

done8:
	VZEROUPPER
	RET
