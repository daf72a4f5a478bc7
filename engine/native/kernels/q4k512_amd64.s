//go:build goexperiment.simd && amd64

#include "textflag.h"

// Q4_K × Q8_K at the AVX-512 level in assembly (q4k512asm_amd64.go
// declares the functions, says why, and why the results are bitwise the
// archsimd kernels'). Per super-block and output: the eight 6-bit scales
// and mins decoded in vector registers, 4-value raw sums of nibbles ×
// activations by VPDPBUSD, two raw sums packed per dword as int16 and
// multiplied by their scales and added by one VPDPWSSD, the 512-bit
// halves folded to the archsimd kernels' eight int32 lanes, then one
// conversion and one FMA for [d·dx·sumi | dmin·dx·mins] together.
//
// Registers shared by the macros: Z31 = 0x0F bytes, Z30 = q4kShift, Z28 =
// 0xFFFF per dword, Z26, Z27 = the scale indices, Y25 = q4kMinIdx, K1 =
// the lower eight dwords; Z8-Z15 the super-block's scales, mins and
// d | dmin; Z16-Z19 activations (decode) or unpacked weights (prefill).

// Per-16-bit-lane shift counts (prefill's unpacking): the lower half's
// bytes keep their low nibbles, the upper half's get the high ones.
DATA q4kShift<>+0(SB)/8, $0
DATA q4kShift<>+8(SB)/8, $0
DATA q4kShift<>+16(SB)/8, $0
DATA q4kShift<>+24(SB)/8, $0
DATA q4kShift<>+32(SB)/8, $0x0004000400040004
DATA q4kShift<>+40(SB)/8, $0x0004000400040004
DATA q4kShift<>+48(SB)/8, $0x0004000400040004
DATA q4kShift<>+56(SB)/8, $0x0004000400040004
GLOBL q4kShift<>(SB), RODATA|NOPTR, $64

// VPSHUFB indices into the sixteen scale and min bytes (kScaleBytes'
// two words) repeated in every 128-bit lane, zero-extending bytes to
// int16 lanes: two scale vectors per super-block, 64 bytes each, whose
// dwords hold the scales of the two sub-blocks whose raw sums Q4K_PACK
// puts in a dword's low and high words; the lower 256 bits and the upper
// differ. q4kScIdxP (decode, Q4K_DPAIR's sums): (0, 1) | (2, 3), then
// (4, 5) | (6, 7). q4kScIdxJ (prefill, Q4K_TOK's): (0, 2) | (1, 3), then
// (4, 6) | (5, 7). q4kMinIdx: each min twice, mins 0-3 in the lower 128
// bits, 4-7 in the upper (kMins' layout). q4kHalfIdx: the fp16 d eight
// times in the lower 128 bits, dmin in the upper, from d, dmin broadcast
// as one dword.
DATA q4kScIdxP<>+0(SB)/8, $0x8001800080018000
DATA q4kScIdxP<>+8(SB)/8, $0x8001800080018000
DATA q4kScIdxP<>+16(SB)/8, $0x8001800080018000
DATA q4kScIdxP<>+24(SB)/8, $0x8001800080018000
DATA q4kScIdxP<>+32(SB)/8, $0x8003800280038002
DATA q4kScIdxP<>+40(SB)/8, $0x8003800280038002
DATA q4kScIdxP<>+48(SB)/8, $0x8003800280038002
DATA q4kScIdxP<>+56(SB)/8, $0x8003800280038002
DATA q4kScIdxP<>+64(SB)/8, $0x8005800480058004
DATA q4kScIdxP<>+72(SB)/8, $0x8005800480058004
DATA q4kScIdxP<>+80(SB)/8, $0x8005800480058004
DATA q4kScIdxP<>+88(SB)/8, $0x8005800480058004
DATA q4kScIdxP<>+96(SB)/8, $0x8007800680078006
DATA q4kScIdxP<>+104(SB)/8, $0x8007800680078006
DATA q4kScIdxP<>+112(SB)/8, $0x8007800680078006
DATA q4kScIdxP<>+120(SB)/8, $0x8007800680078006
GLOBL q4kScIdxP<>(SB), RODATA|NOPTR, $128
DATA q4kMinIdx<>+0(SB)/8, $0x8009800980088008
DATA q4kMinIdx<>+8(SB)/8, $0x800b800b800a800a
DATA q4kMinIdx<>+16(SB)/8, $0x800d800d800c800c
DATA q4kMinIdx<>+24(SB)/8, $0x800f800f800e800e
GLOBL q4kMinIdx<>(SB), RODATA|NOPTR, $32
DATA q4kHalfIdx<>+0(SB)/8, $0x0100010001000100
DATA q4kHalfIdx<>+8(SB)/8, $0x0100010001000100
DATA q4kHalfIdx<>+16(SB)/8, $0x0302030203020302
DATA q4kHalfIdx<>+24(SB)/8, $0x0302030203020302
GLOBL q4kHalfIdx<>(SB), RODATA|NOPTR, $32

DATA q4kScIdxJ<>+0(SB)/8, $0x8002800080028000
DATA q4kScIdxJ<>+8(SB)/8, $0x8002800080028000
DATA q4kScIdxJ<>+16(SB)/8, $0x8002800080028000
DATA q4kScIdxJ<>+24(SB)/8, $0x8002800080028000
DATA q4kScIdxJ<>+32(SB)/8, $0x8003800180038001
DATA q4kScIdxJ<>+40(SB)/8, $0x8003800180038001
DATA q4kScIdxJ<>+48(SB)/8, $0x8003800180038001
DATA q4kScIdxJ<>+56(SB)/8, $0x8003800180038001
DATA q4kScIdxJ<>+64(SB)/8, $0x8006800480068004
DATA q4kScIdxJ<>+72(SB)/8, $0x8006800480068004
DATA q4kScIdxJ<>+80(SB)/8, $0x8006800480068004
DATA q4kScIdxJ<>+88(SB)/8, $0x8006800480068004
DATA q4kScIdxJ<>+96(SB)/8, $0x8007800580078005
DATA q4kScIdxJ<>+104(SB)/8, $0x8007800580078005
DATA q4kScIdxJ<>+112(SB)/8, $0x8007800580078005
DATA q4kScIdxJ<>+120(SB)/8, $0x8007800580078005
GLOBL q4kScIdxJ<>(SB), RODATA|NOPTR, $128

// The scale-byte decoding's constants, per 128-bit lane (dwords): the
// shift counts of [u0, u2, u1, u2] and the masks (kScaleBytes' kmask1,
// kmask2, kmask3 << 4).
DATA q4kScSh<>+0(SB)/8, $0x0000000000000000
DATA q4kScSh<>+8(SB)/8, $0x0000000400000000
DATA q4kScSh<>+16(SB)/8, $0x0000000000000000
DATA q4kScSh<>+24(SB)/8, $0x0000000400000000
DATA q4kScSh<>+32(SB)/8, $0x0000000000000000
DATA q4kScSh<>+40(SB)/8, $0x0000000400000000
DATA q4kScSh<>+48(SB)/8, $0x0000000000000000
DATA q4kScSh<>+56(SB)/8, $0x0000000400000000
GLOBL q4kScSh<>(SB), RODATA|NOPTR, $64
DATA q4kScM1<>+0(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA q4kScM1<>+8(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA q4kScM1<>+16(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA q4kScM1<>+24(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA q4kScM1<>+32(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA q4kScM1<>+40(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA q4kScM1<>+48(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA q4kScM1<>+56(SB)/8, $0x0f0f0f0f3f3f3f3f
GLOBL q4kScM1<>(SB), RODATA|NOPTR, $64
DATA q4kScM2<>+0(SB)/8, $0x3030303000000000
DATA q4kScM2<>+8(SB)/8, $0x3030303000000000
DATA q4kScM2<>+16(SB)/8, $0x3030303000000000
DATA q4kScM2<>+24(SB)/8, $0x3030303000000000
DATA q4kScM2<>+32(SB)/8, $0x3030303000000000
DATA q4kScM2<>+40(SB)/8, $0x3030303000000000
DATA q4kScM2<>+48(SB)/8, $0x3030303000000000
DATA q4kScM2<>+56(SB)/8, $0x3030303000000000
GLOBL q4kScM2<>(SB), RODATA|NOPTR, $64

// Q4K_CONSTS loads the loop-invariant vectors: Z31 = 0x0F bytes, K1 =
// the lower eight dword lanes, Z28 = 0xFFFF per dword, Z26, Z27 = the
// scale indices of TAB, Y25 = q4kMinIdx, Z30 = q4kShift.
#define Q4K_CONSTS(TAB) \
	MOVL         $0x0f0f0f0f, AX      \
	VPBROADCASTD AX, Z31              \
	MOVL         $0xff, AX            \
	KMOVW        AX, K1               \
	MOVL         $0xffff, AX          \
	VPBROADCASTD AX, Z28              \
	VMOVDQU64    TAB+0(SB), Z26       \
	VMOVDQU64    TAB+64(SB), Z27      \
	VMOVDQU64    q4kMinIdx<>(SB), Y25 \
	VMOVDQU64    q4kShift<>(SB), Z30

// Q4K_SCALES decodes the twelve scale bytes of the super-block at X as
// kScaleBytes does (get_scale_min_k4's utmp shuffle of
// ggml_vec_dot_q4_K_q8_K), in every 128-bit lane at once: from the dwords
// u0, u1, u2 at X+4, [u0 & kmask1, u2 & kmask2 | (u0 >> 2) & 0x30303030,
// u1 & kmask1, (u2 >> 4) & kmask2 | (u1 >> 2) & 0x30303030], which is
// kScaleBytes' scale word then min word ((u >> 6 & kmask3) << 4 is
// (u >> 2) & 0x30303030). Then Z11, Z12 = the two scale vectors (int16,
// Z26, Z27's order) and Y15 = the mins as kMins lays them out. A vector
// decode (six instructions, four deep) in place of the general-register
// one: shorter dependency chains measured faster (a super-block's chain
// is long, and the out-of-order window holds few of them). Clobbers Z8,
// Z9.
#define Q4K_SCALES(X) \
	VBROADCASTI32X4 4(X), Z8              \
	VPSHUFD    $0x98, Z8, Z9              \
	VPSHUFD    $0x50, Z8, Z8              \
	VPSRLVD    q4kScSh<>(SB), Z9, Z9      \
	VPSRLD     $2, Z8, Z8                 \
	VPANDD     q4kScM2<>(SB), Z8, Z8      \
	VPTERNLOGD $0xf8, q4kScM1<>(SB), Z9, Z8 \
	VPSHUFB    Z26, Z8, Z11               \
	VPSHUFB    Z27, Z8, Z12               \
	VPSHUFB    Y25, Y8, Y15

// Q4K_DSCALE sets Z10 = d (fp32) in the lower eight lanes, dmin in the
// upper, for the super-block at X.
#define Q4K_DSCALE(X) \
	VPBROADCASTD 0(X), Y10                \
	VPSHUFB      q4kHalfIdx<>(SB), Y10, Y10 \
	VCVTPH2PS    Y10, Z10

// Q4K_FINISH folds the super-block's int32 lanes S (16) and the min sums
// MN (8, in a ymm) into T = [S.lo + S.hi | MN] (the archsimd kernels'
// fold(s) and kMins, as one vector), converts them and adds T·DS to ACC:
// the lower half is a += (d·dx)·sumi, the upper m += (dmin·dx)·mins, lane
// for lane the archsimd FMAs.
#define Q4K_FINISH(S, MN, T, DS, ACC) \
	VSHUFI64X2  $0x4e, MN, S, T   \
	VPADDD      S, T, K1, T       \
	VCVTDQ2PS   T, T              \
	VFMADD231PS DS, T, ACC

// Q4K_PACK puts the raw sums PA (|·| ≤ 4·15·127 = 7620, an int16) in
// the low word of each dword of PB and PB's own in the high word.
#define Q4K_PACK(PA, PB) \
	VPSLLD     $16, PB, PB       \
	VPTERNLOGD $0xf8, Z28, PA, PB

// Q4K_DPAIR is one 64-byte weight load at off(X) (j = 2p, 2p+1): its low
// nibbles (sub-blocks 4p | 4p+2) against LO, its high nibbles (4p+1 |
// 4p+3) against HI, the activations rearranged to match (Q4K_DACT). Each
// gives raw 4-value sums per int32 lane (VPDPBUSD into zero); packed as
// int16 pairs (sub-blocks 4p, 4p+1 | 4p+2, 4p+3), one VPDPWSSD with the
// scale vector C adds sc·sum for both to S.
#define Q4K_DPAIR(X, off, LO, HI, C, S) \
	VMOVDQU64 off(X), Z4   \
	VPSRLW    $4, Z4, Z5   \
	VPANDD    Z31, Z4, Z4  \
	VPANDD    Z31, Z5, Z5  \
	VPXORD    Z6, Z6, Z6   \
	VPDPBUSD  LO, Z4, Z6   \
	VPXORD    Z7, Z7, Z7   \
	VPDPBUSD  HI, Z5, Z7   \
	Q4K_PACK(Z6, Z7)       \
	VPDPWSSD  C, Z7, S

// Q4K_DROW folds the super-block at X into ACC ([a | m]) against the
// activations rearranged in Z16-Z19 (bsums at BX, dx in Z24).
#define Q4K_DROW(X, ACC) \
	Q4K_SCALES(X)                     \
	VPMADDWD   (BX), Y15, Y15         \
	VPXORD     Z9, Z9, Z9             \
	Q4K_DPAIR(X, 16, Z16, Z17, Z11, Z9) \
	Q4K_DPAIR(X, 80, Z18, Z19, Z12, Z9) \
	Q4K_DSCALE(X)                     \
	VMULPS     Z24, Z10, Z10          \
	Q4K_FINISH(Z9, Z15, Z6, Z10, ACC)

// Q4K_DACT loads the super-block's 256 activations at SI as Z16 = values
// 0-31 | 64-95, Z17 = 32-63 | 96-127, Z18 = 128-159 | 192-223, Z19 =
// 160-191 | 224-255 (what Q4K_DPAIR's nibbles meet), and dx into Z24. Shared
// by the rows of a call: one token (decode).
#define Q4K_DACT \
	VBROADCASTSS (DI), Z24            \
	VMOVDQU64    0(SI), Z20           \
	VMOVDQU64    64(SI), Z21          \
	VSHUFI64X2   $0x44, Z21, Z20, Z16 \
	VSHUFI64X2   $0xee, Z21, Z20, Z17 \
	VMOVDQU64    128(SI), Z22         \
	VMOVDQU64    192(SI), Z23         \
	VSHUFI64X2   $0x44, Z23, Z22, Z18 \
	VSHUFI64X2   $0xee, Z23, Z22, Z19

// STORE_AM stores ACC's a − m (lower half minus upper) at off(AX).
#define STORE_AM(ACC, Y, off) \
	VEXTRACTF64X4 $1, ACC, Y8 \
	VSUBPS        Y8, Y, Y    \
	VMOVUPS       Y, off(AX)

// Q4K_TUNPACK unpacks the super-block at X for the token loop: Z16-Z19 =
// the weights of j = 0..3 (low nibbles | high nibbles, q4kStep4x512's
// layout), Z10 = d | dmin.
#define Q4K_TUNPACK(X) \
	VBROADCASTI64X4 16(X), Z16  \
	VPSRLVW         Z30, Z16, Z16 \
	VPANDD          Z31, Z16, Z16 \
	VBROADCASTI64X4 48(X), Z17  \
	VPSRLVW         Z30, Z17, Z17 \
	VPANDD          Z31, Z17, Z17 \
	VBROADCASTI64X4 80(X), Z18  \
	VPSRLVW         Z30, Z18, Z18 \
	VPANDD          Z31, Z18, Z18 \
	VBROADCASTI64X4 112(X), Z19 \
	VPSRLVW         Z30, Z19, Z19 \
	VPANDD          Z31, Z19, Z19 \
	Q4K_DSCALE(X)

// Q4K_TOK folds the unpacked super-block against the token at R9 (bsums
// R10, scale R11) into ACC, then steps R9-R11 to the next token (byte
// strides YS, BSS, DS).
#define Q4K_TOK(ACC, YS, BSS, DS) \
	VPXORD      Z20, Z20, Z20      \
	VPXORD      Z21, Z21, Z21      \
	VPXORD      Z22, Z22, Z22      \
	VPXORD      Z23, Z23, Z23      \
	VPDPBUSD    0(R9), Z16, Z20    \
	VPDPBUSD    64(R9), Z17, Z21   \
	VPDPBUSD    128(R9), Z18, Z22  \
	VPDPBUSD    192(R9), Z19, Z23  \
	Q4K_PACK(Z20, Z21)             \
	Q4K_PACK(Z22, Z23)             \
	VPMADDWD    Z11, Z21, Z20      \
	VPDPWSSD    Z12, Z23, Z20      \
	VPMADDWD    0(R10), Y15, Y22   \
	VBROADCASTSS 0(R11), Z24       \
	VMULPS      Z24, Z10, Z24      \
	Q4K_FINISH(Z20, Z22, Z23, Z24, ACC) \
	ADDQ        YS, R9             \
	ADDQ        BSS, R10           \
	ADDQ        DS, R11

// HSUM4R reduces Y0-Y3 (four rows' a − m) to their four sums in X0, in
// hsum4's order: each row's 128-bit halves added, then the pairs added
// (VHADDPS) as hsum4's AddPairs add them.
#define HSUM4R \
	VEXTRACTF128 $1, Y0, X8 \
	VADDPS       X8, X0, X0 \
	VEXTRACTF128 $1, Y1, X8 \
	VADDPS       X8, X1, X1 \
	VEXTRACTF128 $1, Y2, X8 \
	VADDPS       X8, X2, X2 \
	VEXTRACTF128 $1, Y3, X8 \
	VADDPS       X8, X3, X3 \
	VHADDPS      X1, X0, X0 \
	VHADDPS      X3, X2, X2 \
	VHADDPS      X2, X0, X0

// HSUM4 stores at (R13) the four sums of the [a | m] accumulators Z0-Z3.
#define HSUM4 \
	VEXTRACTF64X4 $1, Z0, Y8 \
	VSUBPS        Y8, Y0, Y0 \
	VEXTRACTF64X4 $1, Z1, Y8 \
	VSUBPS        Y8, Y1, Y1 \
	VEXTRACTF64X4 $1, Z2, Y8 \
	VSUBPS        Y8, Y2, Y2 \
	VEXTRACTF64X4 $1, Z3, Y8 \
	VSUBPS        Y8, Y3, Y3 \
	HSUM4R                   \
	VMOVUPS       X0, (R13)

// PF_OUT stores token k's four sums from the prefill scratch at R10
// ([row][token][8]) to (R9).
#define PF_OUT(k) \
	VMOVUPS k*32(R10), Y0     \
	VMOVUPS 256+k*32(R10), Y1 \
	VMOVUPS 512+k*32(R10), Y2 \
	VMOVUPS 768+k*32(R10), Y3 \
	HSUM4R                    \
	VMOVUPS X0, (R9)          \
	ADDQ    ostride+8(FP), R9

// func q4kRow1AVX512(acc *[8]float32, x unsafe.Pointer, n int, y, d, bs unsafe.Pointer)
TEXT ·q4kRow1AVX512(SB), NOSPLIT, $0-48
	MOVQ x+8(FP), R8
	MOVQ n+16(FP), CX
	MOVQ y+24(FP), SI
	MOVQ d+32(FP), DI
	MOVQ bs+40(FP), BX
	Q4K_CONSTS(q4kScIdxP<>)
	VPXORD Z0, Z0, Z0
	TESTQ  CX, CX
	JLE    row1done

row1loop:
	Q4K_DACT
	Q4K_DROW(R8, Z0)
	ADDQ $144, R8
	ADDQ $256, SI
	ADDQ $32, BX
	ADDQ $4, DI
	DECQ CX
	JNZ  row1loop

row1done:
	MOVQ acc+0(FP), AX
	STORE_AM(Z0, Y0, 0)
	VZEROUPPER
	RET

// func q4kRow4AVX512(acc *[4][8]float32, x0, x1, x2, x3 unsafe.Pointer, n int, y, d, bs unsafe.Pointer)
TEXT ·q4kRow4AVX512(SB), NOSPLIT, $0-72
	MOVQ x0+8(FP), R8
	MOVQ x1+16(FP), R9
	MOVQ x2+24(FP), R10
	MOVQ x3+32(FP), R11
	MOVQ n+40(FP), CX
	MOVQ y+48(FP), SI
	MOVQ d+56(FP), DI
	MOVQ bs+64(FP), BX
	Q4K_CONSTS(q4kScIdxP<>)
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	TESTQ  CX, CX
	JLE    row4done

row4loop:
	Q4K_DACT
	Q4K_DROW(R8, Z0)
	Q4K_DROW(R9, Z1)
	Q4K_DROW(R10, Z2)
	Q4K_DROW(R11, Z3)
	ADDQ $144, R8
	ADDQ $144, R9
	ADDQ $144, R10
	ADDQ $144, R11
	ADDQ $256, SI
	ADDQ $32, BX
	ADDQ $4, DI
	DECQ CX
	JNZ  row4loop

row4done:
	MOVQ acc+0(FP), AX
	STORE_AM(Z0, Y0, 0)
	STORE_AM(Z1, Y1, 32)
	STORE_AM(Z2, Y2, 64)
	STORE_AM(Z3, Y3, 96)
	VZEROUPPER
	RET

// func q4kTok4AVX512(acc *[4][8]float32, x unsafe.Pointer, n int, y, d, bs unsafe.Pointer, ys, ds, bss int)
TEXT ·q4kTok4AVX512(SB), NOSPLIT, $0-72
	MOVQ x+8(FP), R8
	MOVQ n+16(FP), CX
	MOVQ y+24(FP), SI
	MOVQ d+32(FP), DI
	MOVQ bs+40(FP), BX
	Q4K_CONSTS(q4kScIdxJ<>)
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	TESTQ  CX, CX
	JLE    tok4done

tok4loop:
	Q4K_SCALES(R8)
	Q4K_TUNPACK(R8)
	MOVQ SI, R9
	MOVQ BX, R10
	MOVQ DI, R11
	Q4K_TOK(Z0, ys+48(FP), bss+64(FP), ds+56(FP))
	Q4K_TOK(Z1, ys+48(FP), bss+64(FP), ds+56(FP))
	Q4K_TOK(Z2, ys+48(FP), bss+64(FP), ds+56(FP))
	Q4K_TOK(Z3, ys+48(FP), bss+64(FP), ds+56(FP))
	ADDQ $144, R8
	ADDQ $256, SI
	ADDQ $32, BX
	ADDQ $4, DI
	DECQ CX
	JNZ  tok4loop

tok4done:
	MOVQ acc+0(FP), AX
	STORE_AM(Z0, Y0, 0)
	STORE_AM(Z1, Y1, 32)
	STORE_AM(Z2, Y2, 64)
	STORE_AM(Z3, Y3, 96)
	VZEROUPPER
	RET

// func q4kTok8AVX512(acc *[8][8]float32, x unsafe.Pointer, n int, y, d, bs unsafe.Pointer, ys, ds, bss int)
TEXT ·q4kTok8AVX512(SB), NOSPLIT, $0-72
	MOVQ x+8(FP), R8
	MOVQ n+16(FP), CX
	MOVQ y+24(FP), SI
	MOVQ d+32(FP), DI
	MOVQ bs+40(FP), BX
	Q4K_CONSTS(q4kScIdxJ<>)
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	TESTQ  CX, CX
	JLE    tok8done

tok8loop:
	Q4K_SCALES(R8)
	Q4K_TUNPACK(R8)
	MOVQ SI, R9
	MOVQ BX, R10
	MOVQ DI, R11
	Q4K_TOK(Z0, ys+48(FP), bss+64(FP), ds+56(FP))
	Q4K_TOK(Z1, ys+48(FP), bss+64(FP), ds+56(FP))
	Q4K_TOK(Z2, ys+48(FP), bss+64(FP), ds+56(FP))
	Q4K_TOK(Z3, ys+48(FP), bss+64(FP), ds+56(FP))
	Q4K_TOK(Z4, ys+48(FP), bss+64(FP), ds+56(FP))
	Q4K_TOK(Z5, ys+48(FP), bss+64(FP), ds+56(FP))
	Q4K_TOK(Z6, ys+48(FP), bss+64(FP), ds+56(FP))
	Q4K_TOK(Z7, ys+48(FP), bss+64(FP), ds+56(FP))
	ADDQ $144, R8
	ADDQ $256, SI
	ADDQ $32, BX
	ADDQ $4, DI
	DECQ CX
	JNZ  tok8loop

tok8done:
	MOVQ acc+0(FP), AX
	STORE_AM(Z0, Y0, 0)
	STORE_AM(Z1, Y1, 32)
	STORE_AM(Z2, Y2, 64)
	STORE_AM(Z3, Y3, 96)
	STORE_AM(Z4, Y4, 128)
	STORE_AM(Z5, Y5, 160)
	STORE_AM(Z6, Y6, 192)
	STORE_AM(Z7, Y7, 224)
	VZEROUPPER
	RET

// func q4kDecodeAVX512(out *float32, x unsafe.Pointer, rb, groups, n int, y, d, bs unsafe.Pointer)
TEXT ·q4kDecodeAVX512(SB), NOSPLIT, $0-64
	MOVQ out+0(FP), R13
	MOVQ x+8(FP), R8
	MOVQ groups+24(FP), R12
	Q4K_CONSTS(q4kScIdxP<>)
	TESTQ R12, R12
	JLE   decdone

decgroup:
	MOVQ   rb+16(FP), AX
	LEAQ   (R8)(AX*1), R9
	LEAQ   (R9)(AX*1), R10
	LEAQ   (R10)(AX*1), R11
	MOVQ   n+32(FP), CX
	MOVQ   y+40(FP), SI
	MOVQ   d+48(FP), DI
	MOVQ   bs+56(FP), BX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	TESTQ  CX, CX
	JLE    decstore

decloop:
	Q4K_DACT
	Q4K_DROW(R8, Z0)
	Q4K_DROW(R9, Z1)
	Q4K_DROW(R10, Z2)
	Q4K_DROW(R11, Z3)
	ADDQ $144, R8
	ADDQ $144, R9
	ADDQ $144, R10
	ADDQ $144, R11
	ADDQ $256, SI
	ADDQ $32, BX
	ADDQ $4, DI
	DECQ CX
	JNZ  decloop

decstore:
	HSUM4
	ADDQ $16, R13
	// R11 has walked row 3 to its end: the next group's first row.
	MOVQ R11, R8
	DECQ R12
	JNZ  decgroup

decdone:
	VZEROUPPER
	RET

// func q4kPrefill4AVX512(out *float32, ostride int, x unsafe.Pointer, rb, n int, y unsafe.Pointer, ys int, d unsafe.Pointer, ds int, bs unsafe.Pointer, bss, tblocks int, scratch *[4][8][8]float32)
//
// The token strides stay in registers (R12, R13, DX: stepping R9-R11
// through the eight tokens by ADDQ from the argument slots put a load in
// each step's dependency chain, 5 % of the time), so the loop counters
// and the output and scratch pointers live in the frame.
TEXT ·q4kPrefill4AVX512(SB), NOSPLIT, $32-104
	Q4K_CONSTS(q4kScIdxJ<>)
	MOVQ  tblocks+88(FP), AX
	TESTQ AX, AX
	JLE   pfdone
	MOVQ  AX, blk-32(SP)
	MOVQ  out+0(FP), AX
	MOVQ  AX, outp-16(SP)
	MOVQ  y+40(FP), SI
	MOVQ  d+56(FP), DI
	MOVQ  bs+72(FP), BX
	MOVQ  ys+48(FP), R12
	MOVQ  bss+80(FP), R13
	MOVQ  ds+64(FP), DX

pfblock:
	MOVQ x+16(FP), R8
	MOVQ scratch+96(FP), AX
	MOVQ AX, scr-8(SP)
	MOVQ $4, rowc-24(SP)

pfrow:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	MOVQ   n+32(FP), CX
	TESTQ  CX, CX
	JLE    pfrowdone

pfloop:
	Q4K_SCALES(R8)
	Q4K_TUNPACK(R8)
	MOVQ SI, R9
	MOVQ BX, R10
	MOVQ DI, R11
	Q4K_TOK(Z0, R12, R13, DX)
	Q4K_TOK(Z1, R12, R13, DX)
	Q4K_TOK(Z2, R12, R13, DX)
	Q4K_TOK(Z3, R12, R13, DX)
	Q4K_TOK(Z4, R12, R13, DX)
	Q4K_TOK(Z5, R12, R13, DX)
	Q4K_TOK(Z6, R12, R13, DX)
	Q4K_TOK(Z7, R12, R13, DX)
	ADDQ $144, R8
	ADDQ $256, SI
	ADDQ $32, BX
	ADDQ $4, DI
	DECQ CX
	JNZ  pfloop

	// Back to the token block's first super-block.
	MOVQ n+32(FP), CX
	MOVQ CX, R9
	SHLQ $8, R9
	SUBQ R9, SI
	SHLQ $5, CX
	SUBQ CX, BX
	SHRQ $3, CX
	SUBQ CX, DI

pfrowdone:
	MOVQ scr-8(SP), AX
	STORE_AM(Z0, Y0, 0)
	STORE_AM(Z1, Y1, 32)
	STORE_AM(Z2, Y2, 64)
	STORE_AM(Z3, Y3, 96)
	STORE_AM(Z4, Y4, 128)
	STORE_AM(Z5, Y5, 160)
	STORE_AM(Z6, Y6, 192)
	STORE_AM(Z7, Y7, 224)
	ADDQ $256, AX
	MOVQ AX, scr-8(SP)
	// R8 has walked the row to its end: the next row.
	DECQ rowc-24(SP)
	JNZ  pfrow

	MOVQ scratch+96(FP), R10
	MOVQ outp-16(SP), R9
	PF_OUT(0)
	PF_OUT(1)
	PF_OUT(2)
	PF_OUT(3)
	PF_OUT(4)
	PF_OUT(5)
	PF_OUT(6)
	PF_OUT(7)
	MOVQ R9, outp-16(SP)
	MOVQ R12, R9
	SHLQ $3, R9
	ADDQ R9, SI
	MOVQ R13, R9
	SHLQ $3, R9
	ADDQ R9, BX
	MOVQ DX, R9
	SHLQ $3, R9
	ADDQ R9, DI
	DECQ blk-32(SP)
	JNZ  pfblock

pfdone:
	VZEROUPPER
	RET
