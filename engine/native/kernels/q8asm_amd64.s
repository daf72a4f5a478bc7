//go:build goexperiment.simd && amd64

#include "textflag.h"
#include "hsum_amd64.h"


// Q8_0 × Q8_0 tiles of the AVX-512 level in assembly (q8asm_amd64.go says
// why and what order they keep). Every output is reduced as:
//
//   for each group g in order:
//     p   = VPMADDWD(sext16(w[g]), sext16(x[g]))   16 exact int32 pair sums
//     acc = fma(float(p), ws[g]*xs[g], acc)         one 16-lane accumulator
//   then lanes j+8 onto j, j+4 onto j, pairs, pair sums (fold16 + hsum4),
//
// ws[g] being block g's fp16 scale widened exactly to fp32.
//
// The scale products ws[g]*xs[g] (one fp32 multiply, as fillScales does)
// are made 16 groups at a time into the frame and broadcast from there by
// the FMA (embedded broadcast), so the group loop has no scalar float
// code. Scale loads are masked to the groups that exist: nothing past the
// end of a scale slice is read (masked-off lanes do not fault), whatever
// its capacity.

// SCALEMASK sets CX = min(16, G - DI) and K1 to its low CX bits. Clobbers AX.
#define SCALEMASK(G) \
	MOVQ G, CX; \
	SUBQ DI, CX; \
	CMPQ CX, $16; \
	JLE  2(PC); \
	MOVQ $16, CX; \
	MOVL $1, AX; \
	SHLL CX, AX; \
	DECL AX; \
	KMOVW AX, K1

// SCALES4 stores the 4 scale products of weight row scales at (BX)(DI*4)
// (masked by K1) with the four tokens' activation scales in Z16..Z19, at
// frame offsets O, O+64*4, O+128*4, O+192*4 (token-major: token t, row r
// at (4t+r)*64).
#define SCALES4(O) \
	VMOVUPS.Z (BX)(DI*4), K1, Z20; \
	VMULPS Z16, Z20, Z21; \
	VMOVUPS Z21, O(SP); \
	VMULPS Z17, Z20, Z21; \
	VMOVUPS Z21, O+256(SP); \
	VMULPS Z18, Z20, Z21; \
	VMOVUPS Z21, O+512(SP); \
	VMULPS Z19, Z20, Z21; \
	VMOVUPS Z21, O+768(SP)

// SCALES2 is SCALES4 for two tokens (Z16, Z17; token t, row r at
// (4t+r)*64).
#define SCALES2(O) \
	VMOVUPS.Z (BX)(DI*4), K1, Z20; \
	VMULPS Z16, Z20, Z21; \
	VMOVUPS Z21, O(SP); \
	VMULPS Z17, Z20, Z21; \
	VMOVUPS Z21, O+256(SP)

// func q8SignGroupVNNI(w, x *[32]int8, out *[8]int32)
//
// The sign-trick group sums (q8SignGroup, q8_amd64.go) with one VPDPBUSD
// (AVX512_VNNI) in place of VPMADDUBSW + VPMADDWD(ones): lane k = Σ w·x over
// values 4k..4k+3. Not used by the products (the AVX-512 level's order is
// built on 16 pair-sum lanes per group); TestQ8SignGroupVNNI checks that
// the two give the same exact lanes, for whoever builds on the four-sum
// layout with VNNI.
TEXT ·q8SignGroupVNNI(SB), NOSPLIT, $0-24
	MOVQ w+0(FP), AX
	MOVQ x+8(FP), BX
	MOVQ out+16(FP), CX
	VMOVDQU (AX), Y1
	VMOVDQU (BX), Y2
	VPABSB  Y1, Y3
	VPSIGNB Y1, Y2, Y2
	VPXORD  Y0, Y0, Y0
	VPDPBUSD Y2, Y3, Y0
	VMOVDQU Y0, (CX)
	VZEROUPPER
	RET

// ROWDOTP accumulates the group of one weight row at WADDR against the
// sign-extended activations in XV, with the scale product at SC+AX*4
// broadcast: ACC += float(pairs) * scale. T is a temporary.
#define ROWDOTP(WADDR, XV, T, SC, ACC) \
	VPMOVSXBW WADDR, T; \
	VPMADDWD XV, T, T; \
	VCVTDQ2PS T, T; \
	VFMADD231PS.BCST SC(SP)(AX*4), T, ACC

// The tiles read the 34-byte blocks: the quants of a row's group are at
// its block + 2 and the weight pointers step 34 bytes a group. The
// four-row tiles take the rows' scales widened to fp32 beforehand
// (q8BScales); the eight-row one-token tile gathers each chunk's fp16
// scales from its blocks at a 34-byte stride (q8bIdx) and widens them
// exactly (VCVTPH2PS).

DATA q8bIdx<>+0(SB)/4, $0
DATA q8bIdx<>+4(SB)/4, $34
DATA q8bIdx<>+8(SB)/4, $68
DATA q8bIdx<>+12(SB)/4, $102
DATA q8bIdx<>+16(SB)/4, $136
DATA q8bIdx<>+20(SB)/4, $170
DATA q8bIdx<>+24(SB)/4, $204
DATA q8bIdx<>+28(SB)/4, $238
DATA q8bIdx<>+32(SB)/4, $272
DATA q8bIdx<>+36(SB)/4, $306
DATA q8bIdx<>+40(SB)/4, $340
DATA q8bIdx<>+44(SB)/4, $374
DATA q8bIdx<>+48(SB)/4, $408
DATA q8bIdx<>+52(SB)/4, $442
DATA q8bIdx<>+56(SB)/4, $476
DATA q8bIdx<>+60(SB)/4, $510
GLOBL q8bIdx<>(SB), RODATA|NOPTR, $64

// F16SCALES sets Z to the fp32 scales of the chunk's groups (mask K1) of
// the block row at W (W at the chunk's first block; Z31 = q8bIdx): each
// dword gathered holds a scale in its low half. Lanes off the mask are 0.
#define F16SCALES(W, Z, Y) \
	KMOVW K1, K2; \
	VPXORD Z, Z, Z; \
	VPGATHERDD (W)(Z31*1), K2, Z; \
	VPMOVDW Z, Y; \
	VCVTPH2PS Y, Z

// SCALE1B stores at frame offset O the masked scale products of the row's
// scales, gathered from its blocks at W, with the activation scales in
// Z16.
#define SCALE1B(W, O) \
	F16SCALES(W, Z17, Y17); \
	VMULPS.Z Z17, Z16, K1, Z17; \
	VMOVUPS Z17, O(SP)

// ROWDOTB is ROWDOTP for a block row at W (its current group's block).
#define ROWDOTB(W, XV, T, SC, ACC) \
	VPMOVSXBW 2(W), T; \
	VPMADDWD XV, T, T; \
	VCVTDQ2PS T, T; \
	VFMADD231PS.BCST SC(SP)(AX*4), T, ACC

#define STEP4B \
	ADDQ $34, R8; \
	ADDQ $34, R9; \
	ADDQ $34, R10; \
	ADDQ $34, R11

// func q8BDot4x1(w0, w1, w2, w3 *byte, s0, s1, s2, s3 *float32, x *int8, xs *float32, G int, out *float32)
//
// Four block rows against one token, with the rows' scales widened to
// fp32 at s0..s3 (q8BScales): the 4-row tiles run in prefill, where a tile's
// scales serve every token of the batch, so they are widened once per
// tile and batch instead of gathered again for every four tokens.
TEXT ·q8BDot4x1(SB), 0, $256-96
	MOVQ w0+0(FP), R8
	MOVQ w1+8(FP), R9
	MOVQ w2+16(FP), R10
	MOVQ w3+24(FP), R11
	MOVQ x+64(FP), SI
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	// R12: the next tile's blocks (4 rows of 34·G bytes after w0),
	// prefetched 136 bytes a group: decode streams each weight once per
	// token from DRAM, and the hardware prefetchers, seeing four
	// interleaved streams each a few KiB long, run behind. A prefetch
	// never faults, so the last tile's, past the matrix, is harmless.
	MOVQ G+80(FP), BX
	IMULQ $136, BX
	LEAQ (R8)(BX*1), R12
	XORQ DX, DX
	XORQ DI, DI

chunk1b:
	SCALEMASK(G+80(FP))
	MOVQ xs+72(FP), BX
	VMOVUPS.Z (BX)(DI*4), K1, Z16
	MOVQ s0+32(FP), BX
	VMULPS.Z (BX)(DI*4), Z16, K1, Z17
	VMOVUPS Z17, 0(SP)
	MOVQ s1+40(FP), BX
	VMULPS.Z (BX)(DI*4), Z16, K1, Z17
	VMOVUPS Z17, 64(SP)
	MOVQ s2+48(FP), BX
	VMULPS.Z (BX)(DI*4), Z16, K1, Z17
	VMOVUPS Z17, 128(SP)
	MOVQ s3+56(FP), BX
	VMULPS.Z (BX)(DI*4), Z16, K1, Z17
	VMOVUPS Z17, 192(SP)
	ADDQ CX, DI
	XORQ AX, AX

group1b:
	PREFETCHT0 (R12)
	PREFETCHT0 64(R12)
	PREFETCHT0 128(R12)
	VPMOVSXBW (SI)(DX*1), Z16
	ROWDOTB(R8, Z16, Z17, 0, Z0)
	ROWDOTB(R9, Z16, Z18, 64, Z1)
	ROWDOTB(R10, Z16, Z19, 128, Z2)
	ROWDOTB(R11, Z16, Z20, 192, Z3)
	ADDQ $32, DX
	STEP4B
	ADDQ $136, R12
	INCQ AX
	CMPQ AX, CX
	JLT  group1b
	CMPQ DI, G+80(FP)
	JLT  chunk1b

	FOLD16(Z0, Y0, X0)
	FOLD16(Z1, Y1, X1)
	FOLD16(Z2, Y2, X2)
	FOLD16(Z3, Y3, X3)
	HSUM4(X0, X1, X2, X3)
	MOVQ out+88(FP), BX
	VMOVUPS X0, (BX)
	VZEROUPPER
	RET

// ROW4B accumulates the group of block row W (scale products at frame
// offset O per token) against the four tokens' activations Z16..Z19 into
// A0..A3.
#define ROW4B(W, O, A0, A1, A2, A3) \
	VPMOVSXBW 2(W), Z20; \
	VPMADDWD Z16, Z20, Z21; \
	VPMADDWD Z17, Z20, Z22; \
	VPMADDWD Z18, Z20, Z23; \
	VPMADDWD Z19, Z20, Z24; \
	VCVTDQ2PS Z21, Z21; \
	VCVTDQ2PS Z22, Z22; \
	VCVTDQ2PS Z23, Z23; \
	VCVTDQ2PS Z24, Z24; \
	VFMADD231PS.BCST O(SP)(AX*4), Z21, A0; \
	VFMADD231PS.BCST O+256(SP)(AX*4), Z22, A1; \
	VFMADD231PS.BCST O+512(SP)(AX*4), Z23, A2; \
	VFMADD231PS.BCST O+768(SP)(AX*4), Z24, A3

// func q8BDot4x4(w0, w1, w2, w3 *byte, s0, s1, s2, s3 *float32, x *int8, xs *float32, G, cols int, out *float32, ostride int)
TEXT ·q8BDot4x4(SB), 0, $1024-112
	MOVQ w0+0(FP), R8
	MOVQ w1+8(FP), R9
	MOVQ w2+16(FP), R10
	MOVQ w3+24(FP), R11
	MOVQ x+64(FP), SI
	MOVQ cols+88(FP), BX
	LEAQ (SI)(BX*1), R12
	LEAQ (R12)(BX*1), R13
	LEAQ (R13)(BX*1), R14
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	XORQ DX, DX
	XORQ DI, DI

chunk4b:
	SCALEMASK(G+80(FP))
	MOVQ G+80(FP), AX
	SHLQ $2, AX
	MOVQ xs+72(FP), BX
	LEAQ (BX)(DI*4), BX
	VMOVUPS.Z (BX), K1, Z16
	ADDQ AX, BX
	VMOVUPS.Z (BX), K1, Z17
	ADDQ AX, BX
	VMOVUPS.Z (BX), K1, Z18
	ADDQ AX, BX
	VMOVUPS.Z (BX), K1, Z19
	MOVQ s0+32(FP), BX
	SCALES4(0)
	MOVQ s1+40(FP), BX
	SCALES4(64)
	MOVQ s2+48(FP), BX
	SCALES4(128)
	MOVQ s3+56(FP), BX
	SCALES4(192)
	ADDQ CX, DI
	XORQ AX, AX

group4b:
	VPMOVSXBW (SI)(DX*1), Z16
	VPMOVSXBW (R12)(DX*1), Z17
	VPMOVSXBW (R13)(DX*1), Z18
	VPMOVSXBW (R14)(DX*1), Z19
	ROW4B(R8, 0, Z0, Z4, Z8, Z12)
	ROW4B(R9, 64, Z1, Z5, Z9, Z13)
	ROW4B(R10, 128, Z2, Z6, Z10, Z14)
	ROW4B(R11, 192, Z3, Z7, Z11, Z15)
	ADDQ $32, DX
	STEP4B
	INCQ AX
	CMPQ AX, CX
	JLT  group4b
	CMPQ DI, G+80(FP)
	JLT  chunk4b

	MOVQ out+96(FP), BX
	MOVQ ostride+104(FP), CX
	FOLD16(Z0, Y0, X0)
	FOLD16(Z1, Y1, X1)
	FOLD16(Z2, Y2, X2)
	FOLD16(Z3, Y3, X3)
	HSUM4(X0, X1, X2, X3)
	VMOVUPS X0, (BX)
	ADDQ CX, BX
	FOLD16(Z4, Y4, X4)
	FOLD16(Z5, Y5, X5)
	FOLD16(Z6, Y6, X6)
	FOLD16(Z7, Y7, X7)
	HSUM4(X4, X5, X6, X7)
	VMOVUPS X4, (BX)
	ADDQ CX, BX
	FOLD16(Z8, Y8, X8)
	FOLD16(Z9, Y9, X9)
	FOLD16(Z10, Y10, X10)
	FOLD16(Z11, Y11, X11)
	HSUM4(X8, X9, X10, X11)
	VMOVUPS X8, (BX)
	ADDQ CX, BX
	FOLD16(Z12, Y12, X12)
	FOLD16(Z13, Y13, X13)
	FOLD16(Z14, Y14, X14)
	FOLD16(Z15, Y15, X15)
	HSUM4(X12, X13, X14, X15)
	VMOVUPS X12, (BX)
	VZEROUPPER
	RET

// ROW2B is ROW4B for two tokens.
#define ROW2B(W, O, A0, A1) \
	VPMOVSXBW 2(W), Z20; \
	VPMADDWD Z16, Z20, Z21; \
	VPMADDWD Z17, Z20, Z22; \
	VCVTDQ2PS Z21, Z21; \
	VCVTDQ2PS Z22, Z22; \
	VFMADD231PS.BCST O(SP)(AX*4), Z21, A0; \
	VFMADD231PS.BCST O+256(SP)(AX*4), Z22, A1

// func q8BDot4x2(w0, w1, w2, w3 *byte, s0, s1, s2, s3 *float32, x *int8, xs *float32, G, cols int, out *float32, ostride int)
TEXT ·q8BDot4x2(SB), 0, $512-112
	MOVQ w0+0(FP), R8
	MOVQ w1+8(FP), R9
	MOVQ w2+16(FP), R10
	MOVQ w3+24(FP), R11
	MOVQ x+64(FP), SI
	MOVQ cols+88(FP), BX
	LEAQ (SI)(BX*1), R12
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	XORQ DX, DX
	XORQ DI, DI

chunk2b:
	SCALEMASK(G+80(FP))
	MOVQ G+80(FP), AX
	SHLQ $2, AX
	MOVQ xs+72(FP), BX
	LEAQ (BX)(DI*4), BX
	VMOVUPS.Z (BX), K1, Z16
	ADDQ AX, BX
	VMOVUPS.Z (BX), K1, Z17
	MOVQ s0+32(FP), BX
	SCALES2(0)
	MOVQ s1+40(FP), BX
	SCALES2(64)
	MOVQ s2+48(FP), BX
	SCALES2(128)
	MOVQ s3+56(FP), BX
	SCALES2(192)
	ADDQ CX, DI
	XORQ AX, AX

group2b:
	VPMOVSXBW (SI)(DX*1), Z16
	VPMOVSXBW (R12)(DX*1), Z17
	ROW2B(R8, 0, Z0, Z4)
	ROW2B(R9, 64, Z1, Z5)
	ROW2B(R10, 128, Z2, Z6)
	ROW2B(R11, 192, Z3, Z7)
	ADDQ $32, DX
	STEP4B
	INCQ AX
	CMPQ AX, CX
	JLT  group2b
	CMPQ DI, G+80(FP)
	JLT  chunk2b

	MOVQ out+96(FP), BX
	MOVQ ostride+104(FP), CX
	FOLD16(Z0, Y0, X0)
	FOLD16(Z1, Y1, X1)
	FOLD16(Z2, Y2, X2)
	FOLD16(Z3, Y3, X3)
	HSUM4(X0, X1, X2, X3)
	VMOVUPS X0, (BX)
	ADDQ CX, BX
	FOLD16(Z4, Y4, X4)
	FOLD16(Z5, Y5, X5)
	FOLD16(Z6, Y6, X6)
	FOLD16(Z7, Y7, X7)
	HSUM4(X4, X5, X6, X7)
	VMOVUPS X4, (BX)
	VZEROUPPER
	RET

// func q8BScales(w *byte, G int, s *float32)
//
// Sets s[0..G) to the fp16 scales of the G blocks at w widened to fp32
// (exactly: kernels.F16ToF32's values), 16 at a time; the last store is
// masked to the groups that exist.
TEXT ·q8BScales(SB), NOSPLIT, $0-24
	MOVQ w+0(FP), R8
	MOVQ s+16(FP), SI
	VMOVDQU32 q8bIdx<>(SB), Z31
	XORQ DI, DI

scales:
	SCALEMASK(G+8(FP))
	F16SCALES(R8, Z0, Y0)
	VMOVUPS Z0, K1, (SI)(DI*4)
	ADDQ CX, DI
	ADDQ $544, R8
	CMPQ DI, G+8(FP)
	JLT  scales
	VZEROUPPER
	RET

// func q8BDot8x1(w *byte, x *int8, xs *float32, G, rb int, out *float32)
//
// Eight consecutive block rows (w + r*rb) against one token, storing
// out[0..7]; each chunk's scales gathered from the blocks (SCALE1B).
TEXT ·q8BDot8x1(SB), 0, $512-48
	MOVQ w+0(FP), R8
	MOVQ rb+32(FP), R13
	LEAQ (R8)(R13*1), R9
	LEAQ (R9)(R13*1), R10
	LEAQ (R10)(R13*1), R11
	SHLQ $2, R13            // rows 4..7 at (R8..R11)(R13*1)
	LEAQ (R8)(R13*2), R12   // the next tile, 272 bytes a group
	MOVQ x+8(FP), SI
	VMOVDQU32 q8bIdx<>(SB), Z31
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	XORQ DI, DI

chunk8b:
	SCALEMASK(G+24(FP))
	MOVQ xs+16(FP), BX
	VMOVUPS.Z (BX)(DI*4), K1, Z16
	SCALE1B(R8, 0)
	SCALE1B(R9, 64)
	SCALE1B(R10, 128)
	SCALE1B(R11, 192)
	LEAQ (R8)(R13*1), R14
	SCALE1B(R14, 256)
	LEAQ (R9)(R13*1), R14
	SCALE1B(R14, 320)
	LEAQ (R10)(R13*1), R14
	SCALE1B(R14, 384)
	LEAQ (R11)(R13*1), R14
	SCALE1B(R14, 448)
	ADDQ CX, DI
	XORQ AX, AX

group8b:
	PREFETCHT0 (R12)
	PREFETCHT0 64(R12)
	PREFETCHT0 128(R12)
	PREFETCHT0 192(R12)
	PREFETCHT0 256(R12)
	VPMOVSXBW (SI), Z16
	ROWDOTP(2(R8), Z16, Z17, 0, Z0)
	ROWDOTP(2(R9), Z16, Z18, 64, Z1)
	ROWDOTP(2(R10), Z16, Z19, 128, Z2)
	ROWDOTP(2(R11), Z16, Z20, 192, Z3)
	ROWDOTP(2(R8)(R13*1), Z16, Z21, 256, Z4)
	ROWDOTP(2(R9)(R13*1), Z16, Z22, 320, Z5)
	ROWDOTP(2(R10)(R13*1), Z16, Z23, 384, Z6)
	ROWDOTP(2(R11)(R13*1), Z16, Z24, 448, Z7)
	ADDQ $32, SI
	STEP4B
	ADDQ $272, R12
	INCQ AX
	CMPQ AX, CX
	JLT  group8b
	CMPQ DI, G+24(FP)
	JLT  chunk8b

	MOVQ out+40(FP), BX
	FOLD16(Z0, Y0, X0)
	FOLD16(Z1, Y1, X1)
	FOLD16(Z2, Y2, X2)
	FOLD16(Z3, Y3, X3)
	HSUM4(X0, X1, X2, X3)
	VMOVUPS X0, (BX)
	FOLD16(Z4, Y4, X4)
	FOLD16(Z5, Y5, X5)
	FOLD16(Z6, Y6, X6)
	FOLD16(Z7, Y7, X7)
	HSUM4(X4, X5, X6, X7)
	VMOVUPS X4, 16(BX)
	VZEROUPPER
	RET
