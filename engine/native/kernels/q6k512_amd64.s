//go:build goexperiment.simd && amd64

#include "textflag.h"

// Q6_K × Q8_K in AVX-512 assembly (q6k512_amd64.go says why, what stays
// bitwise and what was measured). Register roles shared by the kernels:
//
//	Z24  bytes 0x0F          Z25  bytes 0x30
//	Z26  word shift counts 4 | 2 (VPSLLVW: qh bits 0-1 | 2-3 to bits 4-5)
//	Z27  word shift counts 0 | 2 (VPSRLVW: qh bits 4-5 | 6-7 to bits 4-5)
//	Z28-Z31  VPERMW indices: vector j (values 64j..64j+63) takes scale
//	         4j + i/8 in word lane i (16 values, one 128-bit lane, per scale)

// q6kPermIdx: word lanes of vector j = 0..3 hold 4j + i/8; as quads, quad
// 2v and 2v+1 hold four words of v = 0..15.
DATA q6kPermIdx<>+0x00(SB)/8, $0x0000000000000000
DATA q6kPermIdx<>+0x08(SB)/8, $0x0000000000000000
DATA q6kPermIdx<>+0x10(SB)/8, $0x0001000100010001
DATA q6kPermIdx<>+0x18(SB)/8, $0x0001000100010001
DATA q6kPermIdx<>+0x20(SB)/8, $0x0002000200020002
DATA q6kPermIdx<>+0x28(SB)/8, $0x0002000200020002
DATA q6kPermIdx<>+0x30(SB)/8, $0x0003000300030003
DATA q6kPermIdx<>+0x38(SB)/8, $0x0003000300030003
DATA q6kPermIdx<>+0x40(SB)/8, $0x0004000400040004
DATA q6kPermIdx<>+0x48(SB)/8, $0x0004000400040004
DATA q6kPermIdx<>+0x50(SB)/8, $0x0005000500050005
DATA q6kPermIdx<>+0x58(SB)/8, $0x0005000500050005
DATA q6kPermIdx<>+0x60(SB)/8, $0x0006000600060006
DATA q6kPermIdx<>+0x68(SB)/8, $0x0006000600060006
DATA q6kPermIdx<>+0x70(SB)/8, $0x0007000700070007
DATA q6kPermIdx<>+0x78(SB)/8, $0x0007000700070007
DATA q6kPermIdx<>+0x80(SB)/8, $0x0008000800080008
DATA q6kPermIdx<>+0x88(SB)/8, $0x0008000800080008
DATA q6kPermIdx<>+0x90(SB)/8, $0x0009000900090009
DATA q6kPermIdx<>+0x98(SB)/8, $0x0009000900090009
DATA q6kPermIdx<>+0xa0(SB)/8, $0x000a000a000a000a
DATA q6kPermIdx<>+0xa8(SB)/8, $0x000a000a000a000a
DATA q6kPermIdx<>+0xb0(SB)/8, $0x000b000b000b000b
DATA q6kPermIdx<>+0xb8(SB)/8, $0x000b000b000b000b
DATA q6kPermIdx<>+0xc0(SB)/8, $0x000c000c000c000c
DATA q6kPermIdx<>+0xc8(SB)/8, $0x000c000c000c000c
DATA q6kPermIdx<>+0xd0(SB)/8, $0x000d000d000d000d
DATA q6kPermIdx<>+0xd8(SB)/8, $0x000d000d000d000d
DATA q6kPermIdx<>+0xe0(SB)/8, $0x000e000e000e000e
DATA q6kPermIdx<>+0xe8(SB)/8, $0x000e000e000e000e
DATA q6kPermIdx<>+0xf0(SB)/8, $0x000f000f000f000f
DATA q6kPermIdx<>+0xf8(SB)/8, $0x000f000f000f000f
GLOBL q6kPermIdx<>(SB), RODATA|NOPTR, $256

#define Q6K_PFDIST 8192

// Z24-Z31 as above; clobbers AX, Y0.
#define Q6K_CONSTS \
	MOVL $0x0F0F0F0F, AX \
	VPBROADCASTD AX, Z24 \
	MOVL $0x30303030, AX \
	VPBROADCASTD AX, Z25 \
	MOVL $0x00040004, AX \
	VPBROADCASTD AX, Z26 \
	MOVL $0x00020002, AX \
	VPBROADCASTD AX, Y0 \
	VINSERTI64X4 $1, Y0, Z26, Z26 \
	VPXORD Z27, Z27, Z27 \
	VINSERTI64X4 $1, Y0, Z27, Z27 \
	VMOVDQU64 q6kPermIdx<>+0x00(SB), Z28 \
	VMOVDQU64 q6kPermIdx<>+0x40(SB), Z29 \
	VMOVDQU64 q6kPermIdx<>+0x80(SB), Z30 \
	VMOVDQU64 q6kPermIdx<>+0xc0(SB), Z31

// Q6K_UNPACK: half h of the super-block at x (ql at qlo(x), qh at qho(x))
// to unsigned values 0..63: v01 = values 128h..128h+63 (the low nibbles of
// ql[64h:64h+64] with qh's bits 0-1 | 2-3 as bits 4-5), v23 = values
// 128h+64..128h+127 (the high nibbles, with qh's bits 4-5 | 6-7); as
// q6kStep4x512. Word shifts never move a wrong bit into the byte bits the
// masks keep. t0, t1 are scratch.
#define Q6K_UNPACK(x, qlo, qho, v01, v23, t0, t1) \
	VMOVDQU64 qlo(x), t0 \
	VBROADCASTI64X4 qho(x), t1 \
	VPSLLVW Z26, t1, v01 \
	VPANDD Z25, v01, v01 \
	VPTERNLOGD $0xF8, Z24, t0, v01 \
	VPSRLVW Z27, t1, v23 \
	VPANDD Z25, v23, v23 \
	VPSRLW $4, t0, t0 \
	VPTERNLOGD $0xF8, Z24, t0, v23

// Q6K_FOLD: s (int32, 16 lanes) to the 256-bit step's eight lanes (lane k
// + lane 8+k), minus the −32 offset off, converted to float in ys.
#define Q6K_FOLD(zs, ys, off, tmp) \
	VEXTRACTI64X4 $1, zs, tmp \
	VPADDD tmp, ys, ys \
	VPSUBD off, ys, ys \
	VCVTDQ2PS ys, ys

// Q6K_ROW1: one super-block of the weight row at x against the activations
// in Z0-Z3 (values), Y4 (bsums) and Y5 (dx in every lane): acc += s·(d·dx),
// s the eight int32 lanes of q6kRow512 (32·sc in Y6 fits int16: at most
// 4096 in magnitude). Clobbers Z6-Z19.
#define Q6K_ROW1(x, acc) \
	VPMOVSXBW 192(x), Y6 \
	VPERMW    Z6, Z28, Z7 \
	VPERMW    Z6, Z29, Z8 \
	VPERMW    Z6, Z30, Z9 \
	VPERMW    Z6, Z31, Z10 \
	VPSLLW    $5, Y6, Y6 \
	VPMADDWD  Y4, Y6, Y11 \
	Q6K_UNPACK(x, 0, 128, Z14, Z16, Z12, Z13) \
	VPMADDUBSW Z0, Z14, Z17 \
	VPMADDWD   Z7, Z17, Z18 \
	VPMADDUBSW Z1, Z16, Z17 \
	VPDPWSSD   Z8, Z17, Z18 \
	Q6K_UNPACK(x, 64, 160, Z14, Z16, Z12, Z13) \
	VPMADDUBSW Z2, Z14, Z17 \
	VPDPWSSD   Z9, Z17, Z18 \
	VPMADDUBSW Z3, Z16, Z17 \
	VPDPWSSD   Z10, Z17, Z18 \
	Q6K_FOLD(Z18, Y18, Y11, Y19) \
	VPBROADCASTW 208(x), X19 \
	VCVTPH2PS    X19, Y19 \
	VMULPS       Y5, Y19, Y19 \
	VFMADD231PS  Y19, Y18, acc

// func q6kRows4AVX512(acc *[4][8]float32, w0, w1, w2, w3 unsafe.Pointer, n int, py, pd, pbs unsafe.Pointer)
TEXT ·q6kRows4AVX512(SB), NOSPLIT, $0-72
	Q6K_CONSTS
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ w2+24(FP), R10
	MOVQ w3+32(FP), R11
	MOVQ n+40(FP), CX
	MOVQ py+48(FP), SI
	MOVQ pd+56(FP), DX
	MOVQ pbs+64(FP), BX
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	TESTQ CX, CX
	JLE   rows4done

rows4loop:
	// The super-block's activations: values, bsums, scale.
	VMOVDQU64    0(SI), Z0
	VMOVDQU64    64(SI), Z1
	VMOVDQU64    128(SI), Z2
	VMOVDQU64    192(SI), Z3
	VMOVDQU      (BX), Y4
	VBROADCASTSS (DX), Y5

	Q6K_ROW1(R8, Y20)
	Q6K_ROW1(R9, Y21)
	Q6K_ROW1(R10, Y22)
	Q6K_ROW1(R11, Y23)

	ADDQ $210, R8
	ADDQ $210, R9
	ADDQ $210, R10
	ADDQ $210, R11
	ADDQ $256, SI
	ADDQ $4, DX
	ADDQ $32, BX
	DECQ CX
	JNZ  rows4loop

rows4done:
	MOVQ    acc+0(FP), DI
	VMOVUPS Y20, 0(DI)
	VMOVUPS Y21, 32(DI)
	VMOVUPS Y22, 64(DI)
	VMOVUPS Y23, 96(DI)
	VZEROUPPER
	RET

// func q6kMatVecAVX512(out unsafe.Pointer, pw unsafe.Pointer, rb, rows, n int, py, pd, pbs unsafe.Pointer)
TEXT ·q6kMatVecAVX512(SB), NOSPLIT, $0-64
	Q6K_CONSTS
	MOVQ out+0(FP), DI
	MOVQ pw+8(FP), R12
	MOVQ rb+16(FP), R14
	MOVQ rows+24(FP), R13
	TESTQ R13, R13
	JLE   mvdone

	// Prefetch: AX runs Q6K_PFDIST bytes ahead of the rows being read (the
	// four rows of a group are contiguous, so it advances 4·210 bytes per
	// super-block); rows+24(FP) becomes the last address a prefetch block
	// may start at, so none goes past the weights.
	LEAQ Q6K_PFDIST(R12), AX
	MOVQ R13, CX
	IMULQ R14, CX
	LEAQ -896(R12)(CX*1), CX
	MOVQ CX, rows+24(FP)

mvgroup:
	// Rows r..r+3, the missing ones of a last partial group repeating the
	// last row (as matKQuantAVX2's tiles do).
	MOVQ    R12, R8
	LEAQ    (R8)(R14*1), R9
	CMPQ    R13, $2
	CMOVQLT R8, R9
	LEAQ    (R9)(R14*1), R10
	CMPQ    R13, $3
	CMOVQLT R9, R10
	LEAQ    (R10)(R14*1), R11
	CMPQ    R13, $4
	CMOVQLT R10, R11
	MOVQ    n+32(FP), CX
	MOVQ    py+40(FP), SI
	MOVQ    pd+48(FP), DX
	MOVQ    pbs+56(FP), BX
	VPXORD  Z20, Z20, Z20
	VPXORD  Z21, Z21, Z21
	VPXORD  Z22, Z22, Z22
	VPXORD  Z23, Z23, Z23
	TESTQ   CX, CX
	JLE     mvsums

mvloop:
	VMOVDQU64    0(SI), Z0
	VMOVDQU64    64(SI), Z1
	VMOVDQU64    128(SI), Z2
	VMOVDQU64    192(SI), Z3
	VMOVDQU      (BX), Y4
	VBROADCASTSS (DX), Y5
	Q6K_ROW1(R8, Y20)
	Q6K_ROW1(R9, Y21)
	Q6K_ROW1(R10, Y22)
	Q6K_ROW1(R11, Y23)
	CMPQ AX, rows+24(FP)
	JHI  mvnopf
	PREFETCHT0 0(AX)
	PREFETCHT0 64(AX)
	PREFETCHT0 128(AX)
	PREFETCHT0 192(AX)
	PREFETCHT0 256(AX)
	PREFETCHT0 320(AX)
	PREFETCHT0 384(AX)
	PREFETCHT0 448(AX)
	PREFETCHT0 512(AX)
	PREFETCHT0 576(AX)
	PREFETCHT0 640(AX)
	PREFETCHT0 704(AX)
	PREFETCHT0 768(AX)
	PREFETCHT0 832(AX)

mvnopf:
	ADDQ $840, AX
	ADDQ $210, R8
	ADDQ $210, R9
	ADDQ $210, R10
	ADDQ $210, R11
	ADDQ $256, SI
	ADDQ $4, DX
	ADDQ $32, BX
	DECQ CX
	JNZ  mvloop

mvsums:
	// hsum4's order: per row lo + hi, then pairwise (VHADDPS) twice.
	VEXTRACTF32X4 $1, Y20, X0
	VADDPS       X0, X20, X0
	VEXTRACTF32X4 $1, Y21, X1
	VADDPS       X1, X21, X1
	VEXTRACTF32X4 $1, Y22, X2
	VADDPS       X2, X22, X2
	VEXTRACTF32X4 $1, Y23, X3
	VADDPS       X3, X23, X3
	VHADDPS      X1, X0, X0
	VHADDPS      X3, X2, X2
	VHADDPS      X2, X0, X0
	CMPQ         R13, $4
	JLT          mvpart
	VMOVUPS      X0, (DI)
	ADDQ         $16, DI
	LEAQ         (R12)(R14*4), R12
	SUBQ         $4, R13
	JNZ          mvgroup
	JMP          mvdone

mvpart:
	// 1-3 rows left: a masked store writes only those.
	MOVQ    R13, CX
	MOVL    $1, AX
	SHLL    CX, AX
	DECL    AX
	KMOVW   AX, K1
	VMOVUPS X0, K1, (DI)

mvdone:
	VZEROUPPER
	RET

// Q6K_DOT4: chunk pair vectors v (row 0) and u (row 1) with their scales
// sv, su, against four tokens' activations at off (token t's values at
// SI, DX, BX, R10), into Z0-Z3 (row 0) and Z4-Z7 (row 1).
#define Q6K_DOT4(off, v, sv, u, su) \
	VPMADDUBSW off(SI), v, Z18 \
	VPDPWSSD   sv, Z18, Z0 \
	VPMADDUBSW off(SI), u, Z19 \
	VPDPWSSD   su, Z19, Z4 \
	VPMADDUBSW off(DX), v, Z18 \
	VPDPWSSD   sv, Z18, Z1 \
	VPMADDUBSW off(DX), u, Z19 \
	VPDPWSSD   su, Z19, Z5 \
	VPMADDUBSW off(BX), v, Z18 \
	VPDPWSSD   sv, Z18, Z2 \
	VPMADDUBSW off(BX), u, Z19 \
	VPDPWSSD   su, Z19, Z6 \
	VPMADDUBSW off(R10), v, Z18 \
	VPDPWSSD   sv, Z18, Z3 \
	VPMADDUBSW off(R10), u, Z19 \
	VPDPWSSD   su, Z19, Z7

// Q6K_FIN4: one token's two outputs (s0: row 0, s1: row 1; the token's
// bsums at bsp + R12, its scale at dp + R11, bsp and dp in locals): fold,
// subtract 32·Σ sc·bsum (Y8, Y9 hold 32·sc), convert, and a += s·(d·dx)
// (d in Y20, Y21) with a in memory at o0(DI), o1(DI).
#define Q6K_FIN4(bsp, dp, s0, y0, s1, y1, o0, o1) \
	MOVQ         bsp, CX \
	VMOVDQU      (CX)(R12*1), Y10 \
	MOVQ         dp, CX \
	VBROADCASTSS (CX)(R11*1), Y11 \
	VPMADDWD     Y10, Y8, Y12 \
	VPMADDWD     Y10, Y9, Y13 \
	Q6K_FOLD(s0, y0, Y12, Y14) \
	Q6K_FOLD(s1, y1, Y13, Y15) \
	VMULPS       Y11, Y20, Y12 \
	VMULPS       Y11, Y21, Y13 \
	VFMADD213PS  o0(DI), Y12, y0 \
	VFMADD213PS  o1(DI), Y13, y1 \
	VMOVUPS      y0, o0(DI) \
	VMOVUPS      y1, o1(DI)

// Q6K_SB2x4: one super-block of the weight rows at R8, R9 against four
// tokens, added to the accumulators acc[row][token] at DI; clobbers CX.
#define Q6K_SB2x4 \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7 \
	VPMOVSXBW 192(R8), Y8 \
	VPMOVSXBW 192(R9), Y9 \
	Q6K_UNPACK(R8, 0, 128, Z14, Z15, Z20, Z21) \
	Q6K_UNPACK(R9, 0, 128, Z16, Z17, Z20, Z21) \
	VPERMW Z8, Z28, Z10 \
	VPERMW Z8, Z29, Z11 \
	VPERMW Z9, Z28, Z12 \
	VPERMW Z9, Z29, Z13 \
	Q6K_DOT4(0, Z14, Z10, Z16, Z12) \
	Q6K_DOT4(64, Z15, Z11, Z17, Z13) \
	Q6K_UNPACK(R8, 64, 160, Z14, Z15, Z20, Z21) \
	Q6K_UNPACK(R9, 64, 160, Z16, Z17, Z20, Z21) \
	VPERMW Z8, Z30, Z10 \
	VPERMW Z8, Z31, Z11 \
	VPERMW Z9, Z30, Z12 \
	VPERMW Z9, Z31, Z13 \
	Q6K_DOT4(128, Z14, Z10, Z16, Z12) \
	Q6K_DOT4(192, Z15, Z11, Z17, Z13) \
	VPSLLW       $5, Y8, Y8 \
	VPSLLW       $5, Y9, Y9 \
	VPBROADCASTW 208(R8), X20 \
	VCVTPH2PS    X20, Y20 \
	VPBROADCASTW 208(R9), X21 \
	VCVTPH2PS    X21, Y21 \
	Q6K_FIN4(bs0-32(SP), d0-64(SP), Z0, Y0, Z4, Y4, 0, 128) \
	Q6K_FIN4(bs1-24(SP), d1-56(SP), Z1, Y1, Z5, Y5, 32, 160) \
	Q6K_FIN4(bs2-16(SP), d2-48(SP), Z2, Y2, Z6, Y6, 64, 192) \
	Q6K_FIN4(bs3-8(SP), d3-40(SP), Z3, Y3, Z7, Y7, 96, 224)

// Q6K_SUM4: token k's four row accumulators (acc[r][k] at DI + 128r + o)
// folded in hsum4's order and stored at dst through K1.
#define Q6K_SUM4(o, dst) \
	VMOVUPS      o(DI), Y0 \
	VMOVUPS      128+o(DI), Y1 \
	VMOVUPS      256+o(DI), Y2 \
	VMOVUPS      384+o(DI), Y3 \
	VEXTRACTF128 $1, Y0, X4 \
	VADDPS       X4, X0, X0 \
	VEXTRACTF128 $1, Y1, X4 \
	VADDPS       X4, X1, X1 \
	VEXTRACTF128 $1, Y2, X4 \
	VADDPS       X4, X2, X2 \
	VEXTRACTF128 $1, Y3, X4 \
	VADDPS       X4, X3, X3 \
	VHADDPS      X1, X0, X0 \
	VHADDPS      X3, X2, X2 \
	VHADDPS      X2, X0, X0 \
	VMOVUPS      X0, K1, dst

// func q6kTile4AVX512(acc *[4][4][8]float32, out unsafe.Pointer, os int, pw unsafe.Pointer, rb, left, n int, py unsafe.Pointer, ys int, pd unsafe.Pointer, ds int, pbs unsafe.Pointer, bss int, ntok int)
TEXT ·q6kTile4AVX512(SB), NOSPLIT, $96-112
	Q6K_CONSTS

	// K1: the rows stored, min(4, left).
	MOVQ left+40(FP), CX
	MOVL $15, AX
	CMPQ CX, $4
	JGE  t4mask
	MOVL $1, AX
	SHLL CX, AX
	DECL AX

t4mask:
	KMOVW AX, K1

	// Token t's values, scale and bsum pointers in locals; tokens past
	// ntok repeat the last one (computed, never stored).
	MOVQ ntok+104(FP), CX
	MOVQ py+56(FP), SI
	MOVQ ys+64(FP), DX
	MOVQ pd+72(FP), R10
	MOVQ ds+80(FP), R11
	MOVQ pbs+88(FP), R12
	MOVQ bss+96(FP), R13
	MOVQ SI, y0-96(SP)
	MOVQ R10, d0-64(SP)
	MOVQ R12, bs0-32(SP)
	CMPQ CX, $2
	JLT  t4tok1
	ADDQ DX, SI
	ADDQ R11, R10
	ADDQ R13, R12

t4tok1:
	MOVQ SI, y1-88(SP)
	MOVQ R10, d1-56(SP)
	MOVQ R12, bs1-24(SP)
	CMPQ CX, $3
	JLT  t4tok2
	ADDQ DX, SI
	ADDQ R11, R10
	ADDQ R13, R12

t4tok2:
	MOVQ SI, y2-80(SP)
	MOVQ R10, d2-48(SP)
	MOVQ R12, bs2-16(SP)
	CMPQ CX, $4
	JLT  t4tok3
	ADDQ DX, SI
	ADDQ R11, R10
	ADDQ R13, R12

t4tok3:
	MOVQ SI, y3-72(SP)
	MOVQ R10, d3-40(SP)
	MOVQ R12, bs3-8(SP)

	// Prefetch (as q6kMatVecAVX512's): R13 runs Q6K_PFDIST bytes ahead,
	// 2·210 bytes per super-block of a pass (the four rows are 4·rb bytes,
	// read in two passes); R14 is the last address a prefetch block may
	// start at, so none goes past the weights (left rows from pw).
	MOVQ  pw+24(FP), R8
	LEAQ  Q6K_PFDIST(R8), R13
	MOVQ  left+40(FP), R14
	IMULQ rb+32(FP), R14
	LEAQ  -448(R8)(R14*1), R14

	// Rows 0 and 1 (a missing row 1 repeats row 0).
	MOVQ    acc+0(FP), DI
	MOVQ    rb+32(FP), CX
	LEAQ    (R8)(CX*1), R9
	CMPQ    left+40(FP), $2
	CMOVQLT R8, R9

t4pass:
	MOVQ    n+48(FP), AX
	MOVQ    y0-96(SP), SI
	MOVQ    y1-88(SP), DX
	MOVQ    y2-80(SP), BX
	MOVQ    y3-72(SP), R10
	XORQ    R11, R11 // 4·i: super-block i's scale
	XORQ    R12, R12 // 32·i: its bsums
	VPXORD  Z0, Z0, Z0
	VMOVUPS Z0, 0(DI)
	VMOVUPS Z0, 64(DI)
	VMOVUPS Z0, 128(DI)
	VMOVUPS Z0, 192(DI)
	TESTQ   AX, AX
	JLE     t4passdone

t4loop:
	Q6K_SB2x4
	CMPQ R13, R14
	JHI  t4nopf
	PREFETCHT0 0(R13)
	PREFETCHT0 64(R13)
	PREFETCHT0 128(R13)
	PREFETCHT0 192(R13)
	PREFETCHT0 256(R13)
	PREFETCHT0 320(R13)
	PREFETCHT0 384(R13)

t4nopf:
	ADDQ $420, R13
	ADDQ $210, R8
	ADDQ $210, R9
	ADDQ $256, SI
	ADDQ $256, DX
	ADDQ $256, BX
	ADDQ $256, R10
	ADDQ $4, R11
	ADDQ $32, R12
	DECQ AX
	JNZ  t4loop

t4passdone:
	// After rows 0 and 1, rows 2 and 3 where there are more than two
	// (a missing row 3 repeats row 2); with two or fewer, acc[2], acc[3]
	// are stale, their sums never stored.
	MOVQ    acc+0(FP), CX
	CMPQ    DI, CX
	JNE     t4sums
	MOVQ    left+40(FP), CX
	CMPQ    CX, $2
	JLE     t4sums
	MOVQ    pw+24(FP), R8
	MOVQ    rb+32(FP), R9
	LEAQ    (R8)(R9*2), R8
	LEAQ    (R8)(R9*1), R9
	CMPQ    CX, $4
	CMOVQLT R8, R9
	ADDQ    $256, DI
	JMP     t4pass

t4sums:
	// Tokens 0..ntok−1 only.
	MOVQ acc+0(FP), DI
	MOVQ out+8(FP), SI
	MOVQ os+16(FP), DX
	MOVQ ntok+104(FP), CX
	Q6K_SUM4(0, (SI))
	CMPQ CX, $2
	JLT  t4done
	ADDQ DX, SI
	Q6K_SUM4(32, (SI))
	CMPQ CX, $3
	JLT  t4done
	ADDQ DX, SI
	Q6K_SUM4(64, (SI))
	CMPQ CX, $4
	JLT  t4done
	ADDQ DX, SI
	Q6K_SUM4(96, (SI))

t4done:
	VZEROUPPER
	RET

// Q6K_DOT8: chunk pair vector v with its scales sv against eight tokens'
// activations at off (token t at SI + t·DX for t < 4, CX + (t−4)·DX after;
// BX = 3·DX), into Z0-Z7.
#define Q6K_DOT8(off, v, sv) \
	VPMADDUBSW off(SI), v, Z18 \
	VPDPWSSD   sv, Z18, Z0 \
	VPMADDUBSW off(SI)(DX*1), v, Z19 \
	VPDPWSSD   sv, Z19, Z1 \
	VPMADDUBSW off(SI)(DX*2), v, Z18 \
	VPDPWSSD   sv, Z18, Z2 \
	VPMADDUBSW off(SI)(BX*1), v, Z19 \
	VPDPWSSD   sv, Z19, Z3 \
	VPMADDUBSW off(CX), v, Z18 \
	VPDPWSSD   sv, Z18, Z4 \
	VPMADDUBSW off(CX)(DX*1), v, Z19 \
	VPDPWSSD   sv, Z19, Z5 \
	VPMADDUBSW off(CX)(DX*2), v, Z18 \
	VPDPWSSD   sv, Z18, Z6 \
	VPMADDUBSW off(CX)(BX*1), v, Z19 \
	VPDPWSSD   sv, Z19, Z7

// Q6K_FIN8: one token's output (bsums at CX, dx at R14, then both moved to
// the next token): fold, subtract 32·Σ sc·bsum (Y8 holds 32·sc), convert,
// and a += s·(d·dx) (d in Y20) with a in memory at o(DI).
#define Q6K_FIN8(s, y, o) \
	VPMADDWD     (CX), Y8, Y12 \
	Q6K_FOLD(s, y, Y12, Y13) \
	VBROADCASTSS (R14), Y11 \
	VMULPS       Y11, Y20, Y11 \
	VFMADD213PS  o(DI), Y11, y \
	VMOVUPS      y, o(DI) \
	ADDQ         R13, CX \
	ADDQ         R11, R14

// Q6K_SB1x8: one super-block of the weight row at R8 against eight tokens
// (values at SI + t·DX, scales at R10 + t·R11, bsums at R12 + t·R13), added
// to the accumulators acc[token] at DI; clobbers CX, R14.
#define Q6K_SB1x8 \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7 \
	LEAQ (SI)(DX*4), CX \
	VPMOVSXBW 192(R8), Y8 \
	Q6K_UNPACK(R8, 0, 128, Z14, Z15, Z20, Z21) \
	VPERMW Z8, Z28, Z10 \
	VPERMW Z8, Z29, Z11 \
	Q6K_DOT8(0, Z14, Z10) \
	Q6K_DOT8(64, Z15, Z11) \
	Q6K_UNPACK(R8, 64, 160, Z14, Z15, Z20, Z21) \
	VPERMW Z8, Z30, Z10 \
	VPERMW Z8, Z31, Z11 \
	Q6K_DOT8(128, Z14, Z10) \
	Q6K_DOT8(192, Z15, Z11) \
	VPSLLW       $5, Y8, Y8 \
	VPBROADCASTW 208(R8), X20 \
	VCVTPH2PS    X20, Y20 \
	MOVQ R12, CX \
	MOVQ R10, R14 \
	Q6K_FIN8(Z0, Y0, 0) \
	Q6K_FIN8(Z1, Y1, 32) \
	Q6K_FIN8(Z2, Y2, 64) \
	Q6K_FIN8(Z3, Y3, 96) \
	Q6K_FIN8(Z4, Y4, 128) \
	Q6K_FIN8(Z5, Y5, 160) \
	Q6K_FIN8(Z6, Y6, 192) \
	Q6K_FIN8(Z7, Y7, 224)

// Q6K_SUM8: token k's four row accumulators (acc[r][k] at DI + 256r + o)
// folded in hsum4's order and stored at dst through K1.
#define Q6K_SUM8(o, dst) \
	VMOVUPS      o(DI), Y0 \
	VMOVUPS      256+o(DI), Y1 \
	VMOVUPS      512+o(DI), Y2 \
	VMOVUPS      768+o(DI), Y3 \
	VEXTRACTF128 $1, Y0, X4 \
	VADDPS       X4, X0, X0 \
	VEXTRACTF128 $1, Y1, X4 \
	VADDPS       X4, X1, X1 \
	VEXTRACTF128 $1, Y2, X4 \
	VADDPS       X4, X2, X2 \
	VEXTRACTF128 $1, Y3, X4 \
	VADDPS       X4, X3, X3 \
	VHADDPS      X1, X0, X0 \
	VHADDPS      X3, X2, X2 \
	VHADDPS      X2, X0, X0 \
	VMOVUPS      X0, K1, dst

// func q6kTile8AVX512(acc *[4][8][8]float32, out unsafe.Pointer, os int, pw unsafe.Pointer, rb, left, n int, py unsafe.Pointer, ys int, pd unsafe.Pointer, ds int, pbs unsafe.Pointer, bss int, steps int)
TEXT ·q6kTile8AVX512(SB), NOSPLIT, $0-112
	Q6K_CONSTS

	// K1: the rows stored, min(4, left); R9: the rows computed.
	MOVQ left+40(FP), CX
	MOVL $15, AX
	MOVQ $4, R9
	CMPQ CX, $4
	JGE  t8mask
	MOVQ CX, R9
	MOVL $1, AX
	SHLL CX, AX
	DECL AX

t8mask:
	KMOVW AX, K1
	CMPQ  steps+104(FP), $0
	JLE   t8done

t8step:
	MOVQ acc+0(FP), DI
	MOVQ pw+24(FP), R8

t8pass:
	// One row (R8) against eight tokens into acc[row] (DI).
	MOVQ    n+48(FP), AX
	MOVQ    py+56(FP), SI
	MOVQ    ys+64(FP), DX
	LEAQ    (DX)(DX*2), BX
	MOVQ    pd+72(FP), R10
	MOVQ    ds+80(FP), R11
	MOVQ    pbs+88(FP), R12
	MOVQ    bss+96(FP), R13
	VPXORD  Z0, Z0, Z0
	VMOVUPS Z0, 0(DI)
	VMOVUPS Z0, 64(DI)
	VMOVUPS Z0, 128(DI)
	VMOVUPS Z0, 192(DI)
	TESTQ   AX, AX
	JLE     t8passdone

t8loop:
	Q6K_SB1x8
	ADDQ $210, R8
	ADDQ $256, SI
	ADDQ $4, R10
	ADDQ $32, R12
	DECQ AX
	JNZ  t8loop

t8passdone:
	// The next row, until R9 rows are done.
	ADDQ $256, DI
	MOVQ R9, CX
	SHLQ $8, CX
	ADDQ acc+0(FP), CX
	CMPQ DI, CX
	JEQ  t8sums
	MOVQ DI, CX
	SUBQ acc+0(FP), CX
	SHRQ $8, CX
	IMULQ rb+32(FP), CX
	MOVQ pw+24(FP), R8
	ADDQ CX, R8
	JMP  t8pass

t8sums:
	MOVQ acc+0(FP), DI
	MOVQ out+8(FP), SI
	MOVQ os+16(FP), DX
	LEAQ (DX)(DX*2), BX
	LEAQ (SI)(DX*4), CX
	Q6K_SUM8(0, (SI))
	Q6K_SUM8(32, (SI)(DX*1))
	Q6K_SUM8(64, (SI)(DX*2))
	Q6K_SUM8(96, (SI)(BX*1))
	Q6K_SUM8(128, (CX))
	Q6K_SUM8(160, (CX)(DX*1))
	Q6K_SUM8(192, (CX)(DX*2))
	Q6K_SUM8(224, (CX)(BX*1))

	// The next eight tokens (no pointer is formed past the last ones).
	DECQ steps+104(FP)
	JZ   t8done
	LEAQ (SI)(DX*8), SI
	MOVQ SI, out+8(FP)
	MOVQ ys+64(FP), CX
	SHLQ $3, CX
	ADDQ CX, py+56(FP)
	MOVQ ds+80(FP), CX
	SHLQ $3, CX
	ADDQ CX, pd+72(FP)
	MOVQ bss+96(FP), CX
	SHLQ $3, CX
	ADDQ CX, pbs+88(FP)
	JMP  t8step

t8done:
	VZEROUPPER
	RET
