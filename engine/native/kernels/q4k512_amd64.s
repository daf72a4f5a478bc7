//go:build goexperiment.simd && amd64

#include "textflag.h"

// Q4_K × Q8_K at the AVX-512 level in assembly (q4k512asm_amd64.go
// declares the functions and says why). Each super-block's integer work
// is q4kRow512's, lane for lane: per 64 activations one 512-bit
// VPMADDUBSW (lower 256 bits: the 32 low nibbles against activations
// 64j..64j+31, upper: the high nibbles against 64j+32..64j+63), then the
// int16 pair sums times the sub-block scales (sc_2j in the lower half,
// sc_2j+1 in the upper) into int32 lanes by VPDPWSSD (VPMADDWD for j = 0),
// the halves folded, converted and FMA'd once with d·dx.

// Per-16-bit-lane shift counts: the lower half's bytes keep their low
// nibbles, the upper half's are shifted down to the high ones.
DATA q4kShift<>+0(SB)/8, $0
DATA q4kShift<>+8(SB)/8, $0
DATA q4kShift<>+16(SB)/8, $0
DATA q4kShift<>+24(SB)/8, $0
DATA q4kShift<>+32(SB)/8, $0x0004000400040004
DATA q4kShift<>+40(SB)/8, $0x0004000400040004
DATA q4kShift<>+48(SB)/8, $0x0004000400040004
DATA q4kShift<>+56(SB)/8, $0x0004000400040004
GLOBL q4kShift<>(SB), RODATA|NOPTR, $64

// VPERMW indices: the eight mins (int16 lanes 8-15 of the unpacked scale
// bytes), each twice, as kMins lays them out for VPMADDWD with the bsums.
DATA q4kMinIdx<>+0(SB)/8, $0x0009000900080008
DATA q4kMinIdx<>+8(SB)/8, $0x000b000b000a000a
DATA q4kMinIdx<>+16(SB)/8, $0x000d000d000c000c
DATA q4kMinIdx<>+24(SB)/8, $0x000f000f000e000e
GLOBL q4kMinIdx<>(SB), RODATA|NOPTR, $32

// VPSHUFB indices, 64 bytes per j: the int16 scale sc_2j in every word of
// the lower 256 bits, sc_2j+1 in the upper (each 128-bit lane holds the
// eight scales as words).
DATA q4kScIdx<>+0(SB)/8, $0x0100010001000100
DATA q4kScIdx<>+8(SB)/8, $0x0100010001000100
DATA q4kScIdx<>+16(SB)/8, $0x0100010001000100
DATA q4kScIdx<>+24(SB)/8, $0x0100010001000100
DATA q4kScIdx<>+32(SB)/8, $0x0302030203020302
DATA q4kScIdx<>+40(SB)/8, $0x0302030203020302
DATA q4kScIdx<>+48(SB)/8, $0x0302030203020302
DATA q4kScIdx<>+56(SB)/8, $0x0302030203020302
DATA q4kScIdx<>+64(SB)/8, $0x0504050405040504
DATA q4kScIdx<>+72(SB)/8, $0x0504050405040504
DATA q4kScIdx<>+80(SB)/8, $0x0504050405040504
DATA q4kScIdx<>+88(SB)/8, $0x0504050405040504
DATA q4kScIdx<>+96(SB)/8, $0x0706070607060706
DATA q4kScIdx<>+104(SB)/8, $0x0706070607060706
DATA q4kScIdx<>+112(SB)/8, $0x0706070607060706
DATA q4kScIdx<>+120(SB)/8, $0x0706070607060706
DATA q4kScIdx<>+128(SB)/8, $0x0908090809080908
DATA q4kScIdx<>+136(SB)/8, $0x0908090809080908
DATA q4kScIdx<>+144(SB)/8, $0x0908090809080908
DATA q4kScIdx<>+152(SB)/8, $0x0908090809080908
DATA q4kScIdx<>+160(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q4kScIdx<>+168(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q4kScIdx<>+176(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q4kScIdx<>+184(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q4kScIdx<>+192(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q4kScIdx<>+200(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q4kScIdx<>+208(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q4kScIdx<>+216(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q4kScIdx<>+224(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA q4kScIdx<>+232(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA q4kScIdx<>+240(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA q4kScIdx<>+248(SB)/8, $0x0f0e0f0e0f0e0f0e
GLOBL q4kScIdx<>(SB), RODATA|NOPTR, $256

// Q4K_CONSTS loads the loop-invariant vectors.
#define Q4K_CONSTS \
	MOVL         $0x0f0f0f0f, AX     \
	VPBROADCASTD AX, Z31             \
	VMOVDQU64    q4kShift<>(SB), Z30 \
	VMOVDQU64    q4kScIdx<>+0(SB), Z26   \
	VMOVDQU64    q4kScIdx<>+64(SB), Z27  \
	VMOVDQU64    q4kScIdx<>+128(SB), Z28 \
	VMOVDQU64    q4kScIdx<>+192(SB), Z29 \
	VMOVDQU64    q4kMinIdx<>(SB), Y25

// Q4K_SCALES decodes the twelve scale bytes of the super-block at X as
// kScaleBytes does (get_scale_min_k4's utmp shuffle), in general
// registers: AX = the eight 6-bit scales, DX = the eight mins. Then
// Z10-Z13 = the scale vectors of j = 0..3 and Y14 = each min twice as
// int16 (kMins' layout). Clobbers AX, DX, R12, R13, Z8, Z9.
#define Q4K_SCALES(X) \
	MOVL      4(X), AX                 \
	MOVL      8(X), DX                 \
	MOVL      AX, R12                  \
	SHRL      $6, R12                  \
	ANDL      $0x03030303, R12         \
	SHLL      $4, R12                  \
	ANDL      $0x3f3f3f3f, AX          \
	MOVL      12(X), R13               \
	ANDL      $0x0f0f0f0f, R13         \
	ORL       R13, R12                 \
	SHLQ      $32, R12                 \
	ORQ       R12, AX                  \
	MOVL      DX, R12                  \
	SHRL      $6, R12                  \
	ANDL      $0x03030303, R12         \
	SHLL      $4, R12                  \
	ANDL      $0x3f3f3f3f, DX          \
	MOVL      12(X), R13               \
	SHRL      $4, R13                  \
	ANDL      $0x0f0f0f0f, R13         \
	ORL       R13, R12                 \
	SHLQ      $32, R12                 \
	ORQ       R12, DX                  \
	VMOVQ     AX, X8                   \
	VPINSRQ   $1, DX, X8, X8           \
	VPMOVZXBW X8, Y8                   \
	VSHUFI32X4 $0, Z8, Z8, Z9          \
	VPERMW    Y8, Y25, Y14             \
	VPSHUFB   Z26, Z9, Z10             \
	VPSHUFB   Z27, Z9, Z11             \
	VPSHUFB   Z28, Z9, Z12             \
	VPSHUFB   Z29, Z9, Z13

// Q4K_UNPACK puts the 32 weight bytes at off(X) in both halves of V and
// keeps the low nibbles in the lower half, the high ones in the upper.
#define Q4K_UNPACK(X, off, V) \
	VBROADCASTI64X4 off(X), V \
	VPSRLVW         Z30, V, V \
	VPANDD          Z31, V, V

// Q4K_ROW folds the super-block at X against the activations at SI
// (bsums at BX, dx broadcast in Y24) into the accumulators A (d·dx·sumi)
// and M (dmin·dx·mins).
#define Q4K_ROW(X, A, M) \
	Q4K_SCALES(X)                   \
	VPMADDWD    (BX), Y14, Y14      \
	VCVTDQ2PS   Y14, Y14            \
	Q4K_UNPACK(X, 16, Z15)          \
	VPMADDUBSW  0(SI), Z15, Z16     \
	VPMADDWD    Z10, Z16, Z17       \
	Q4K_UNPACK(X, 48, Z15)          \
	VPMADDUBSW  64(SI), Z15, Z16    \
	VPDPWSSD    Z11, Z16, Z17       \
	Q4K_UNPACK(X, 80, Z15)          \
	VPMADDUBSW  128(SI), Z15, Z16   \
	VPDPWSSD    Z12, Z16, Z17       \
	Q4K_UNPACK(X, 112, Z15)         \
	VPMADDUBSW  192(SI), Z15, Z16   \
	VPDPWSSD    Z13, Z16, Z17       \
	VEXTRACTI64X4 $1, Z17, Y16      \
	VPADDD      Y16, Y17, Y17       \
	VCVTDQ2PS   Y17, Y17            \
	VPBROADCASTW 0(X), X18          \
	VCVTPH2PS   X18, Y18            \
	VMULPS      Y24, Y18, Y18       \
	VFMADD231PS Y18, Y17, A         \
	VPBROADCASTW 2(X), X19          \
	VCVTPH2PS   X19, Y19            \
	VMULPS      Y24, Y19, Y19       \
	VFMADD231PS Y19, Y14, M

// func q4kRow1AVX512(acc *[8]float32, x unsafe.Pointer, n int, y, d, bs unsafe.Pointer)
TEXT ·q4kRow1AVX512(SB), NOSPLIT, $0-48
	MOVQ x+8(FP), R8
	MOVQ n+16(FP), CX
	MOVQ y+24(FP), SI
	MOVQ d+32(FP), DI
	MOVQ bs+40(FP), BX
	Q4K_CONSTS
	VXORPS Y0, Y0, Y0
	VXORPS Y4, Y4, Y4
	TESTQ  CX, CX
	JLE    row1done

row1loop:
	VBROADCASTSS (DI), Y24
	Q4K_ROW(R8, Y0, Y4)
	ADDQ $144, R8
	ADDQ $256, SI
	ADDQ $32, BX
	ADDQ $4, DI
	DECQ CX
	JNZ  row1loop

row1done:
	MOVQ    acc+0(FP), AX
	VSUBPS  Y4, Y0, Y0
	VMOVUPS Y0, (AX)
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
	Q4K_CONSTS
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	TESTQ  CX, CX
	JLE    row4done

row4loop:
	VBROADCASTSS (DI), Y24
	Q4K_ROW(R8, Y0, Y4)
	Q4K_ROW(R9, Y1, Y5)
	Q4K_ROW(R10, Y2, Y6)
	Q4K_ROW(R11, Y3, Y7)
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
	MOVQ    acc+0(FP), AX
	VSUBPS  Y4, Y0, Y0
	VSUBPS  Y5, Y1, Y1
	VSUBPS  Y6, Y2, Y2
	VSUBPS  Y7, Y3, Y3
	VMOVUPS Y0, (AX)
	VMOVUPS Y1, 32(AX)
	VMOVUPS Y2, 64(AX)
	VMOVUPS Y3, 96(AX)
	VZEROUPPER
	RET

// Q4K_TOK folds the unpacked super-block (weights Z15, Z20-Z22, scale
// vectors Z10-Z13, mins Y14, d and dmin in Y18, Y19) against the token
// at R9 (bsums R10, scale R11) into A and M.
#define Q4K_TOK(A, M) \
	VPMADDUBSW  0(R9), Z15, Z16    \
	VPMADDWD    Z10, Z16, Z17      \
	VPMADDUBSW  64(R9), Z20, Z16   \
	VPDPWSSD    Z11, Z16, Z17      \
	VPMADDUBSW  128(R9), Z21, Z16  \
	VPDPWSSD    Z12, Z16, Z17      \
	VPMADDUBSW  192(R9), Z22, Z16  \
	VPDPWSSD    Z13, Z16, Z17      \
	VEXTRACTI64X4 $1, Z17, Y16     \
	VPADDD      Y16, Y17, Y17      \
	VCVTDQ2PS   Y17, Y17           \
	VBROADCASTSS 0(R11), Y23       \
	VMULPS      Y23, Y18, Y16      \
	VFMADD231PS Y16, Y17, A        \
	VPMADDWD    0(R10), Y14, Y17   \
	VCVTDQ2PS   Y17, Y17           \
	VMULPS      Y23, Y19, Y16      \
	VFMADD231PS Y16, Y17, M

// func q4kTok4AVX512(acc *[4][8]float32, x unsafe.Pointer, n int, y, d, bs unsafe.Pointer, ys, ds, bss int)
TEXT ·q4kTok4AVX512(SB), NOSPLIT, $0-72
	MOVQ x+8(FP), R8
	MOVQ n+16(FP), CX
	MOVQ y+24(FP), SI
	MOVQ d+32(FP), DI
	MOVQ bs+40(FP), BX
	Q4K_CONSTS
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	TESTQ  CX, CX
	JLE    tok4done

tok4loop:
	Q4K_SCALES(R8)
	Q4K_UNPACK(R8, 16, Z15)
	Q4K_UNPACK(R8, 48, Z20)
	Q4K_UNPACK(R8, 80, Z21)
	Q4K_UNPACK(R8, 112, Z22)
	VPBROADCASTW 0(R8), X18
	VCVTPH2PS    X18, Y18
	VPBROADCASTW 2(R8), X19
	VCVTPH2PS    X19, Y19
	MOVQ SI, R9
	MOVQ BX, R10
	MOVQ DI, R11
	Q4K_TOK(Y0, Y4)
	ADDQ ys+48(FP), R9
	ADDQ bss+64(FP), R10
	ADDQ ds+56(FP), R11
	Q4K_TOK(Y1, Y5)
	ADDQ ys+48(FP), R9
	ADDQ bss+64(FP), R10
	ADDQ ds+56(FP), R11
	Q4K_TOK(Y2, Y6)
	ADDQ ys+48(FP), R9
	ADDQ bss+64(FP), R10
	ADDQ ds+56(FP), R11
	Q4K_TOK(Y3, Y7)
	ADDQ $144, R8
	ADDQ $256, SI
	ADDQ $32, BX
	ADDQ $4, DI
	DECQ CX
	JNZ  tok4loop

tok4done:
	MOVQ    acc+0(FP), AX
	VSUBPS  Y4, Y0, Y0
	VSUBPS  Y5, Y1, Y1
	VSUBPS  Y6, Y2, Y2
	VSUBPS  Y7, Y3, Y3
	VMOVUPS Y0, (AX)
	VMOVUPS Y1, 32(AX)
	VMOVUPS Y2, 64(AX)
	VMOVUPS Y3, 96(AX)
	VZEROUPPER
	RET
