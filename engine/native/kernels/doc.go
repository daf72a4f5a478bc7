// Package kernels owns the numeric inner loops of the native engine: the
// fp32, F16 and ggml block-type (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K;
// blocks.go, blocks_amd64.go, q8blocks.go) matrix products, the block
// types as integer dot products against activations quantized once per
// product to int8, the small vector operations around them (RMSNorm, softmax,
// SiLU) and the persistent worker pool that spreads a product over the
// cores.
//
// Every product is defined per output element: out[t][r] is the dot product
// of weight row r with activation row t, reduced in one fixed order that does
// not depend on how many rows or tokens are computed together. A batched
// prefill, a batch of decodes and a single-token step therefore give
// bitwise-equal results, which is what lets prefix caching and KV transfer be
// checked token for token.
//
// Two builds exist. With GOEXPERIMENT=simd on amd64 the products use
// simd/archsimd at the best level the CPU has, picked once at start-up:
// AVX-512 (16-lane kernels), else AVX2+FMA (8-lane), else the portable
// loops; TANDEM_NATIVE_KERNELS=avx2 or =portable picks a lower level, to
// measure or test it. At the AVX-512 level the quantized products run Go
// assembly instead (q8asm_amd64.s: Q8_0; and on CPUs with AVX512_VNNI
// q4k512_amd64.s: Q4_K, q6k512_amd64.s: Q6_K), and so does the one-token
// F16 product (f16asm_amd64.s, rows a multiple of 16 long), bitwise equal
// to the archsimd kernels of that level. Every other build uses portable Go.
// Levels reduce in different orders and agree within the tolerance stated
// in the tests, not bitwise; within one process every product uses one
// level.
//
// Rules the SIMD kernels follow, learned the hard way:
//
//   - Go's register allocator uses 16 vector registers, so the widest tiles
//     are 4 weight rows × 2 tokens (fp32) and 4 × 1 (Q8_0); wider ones
//     spill. Assembly has all 32, which is what it buys where that limit
//     costs most: Q8_0 in 4 weight rows × 4 tokens, Q4_K and Q6_K in 1 row × 8
//     tokens with the row's unpacked weights and scales in registers.
//   - Scalar float code compiles to legacy SSE, and Go zeroes composite
//     locals with legacy-SSE MOVUPS. On Intel both are very slow while the
//     upper halves of the vector registers are dirty (a whole Q8_0
//     decode's slowdown was traced to one zeroed array in a tile loop). So
//     the kernels declare their locals before any vector code, keep results
//     in vector stores, and clear the upper state (ClearAVXUpperBits) before
//     any scalar code and before returning.
//   - Inner loops address memory through unsafe pointers after checking the
//     slice bounds once per call; every pointer formed stays inside its
//     allocation, which go test -race (checkptr) verifies. archsimd's
//     SlicePart helpers are not used: they convert short tails to full
//     array pointers, which checkptr rejects.
//   - A kernel is Go assembly only where a benchmark in the package shows
//     it pays (BenchmarkQ8Kernels, BenchmarkQ4KAsm, BenchmarkQ6KAsm,
//     BenchmarkF16AsmDecode report the ratio against the archsimd kernel in the same run). It keeps that
//     kernel's integer lanes and float order, so it gives its results
//     bitwise, and the archsimd kernel stays reachable (an unexported
//     switch) for the tests that check this and for the benchmarks. Its Go
//     caller checks every bound; it forms no pointer and reads nothing past
//     a slice's end; it ends with VZEROUPPER.
//
// Large weight arrays are allocated with NewF32/NewBytes, which advise Linux
// to back them with transparent huge pages: decode streams every weight
// once per token and is bound by memory bandwidth, where 4 KiB pages cost
// measurably.
package kernels
