// Package kernels owns the numeric inner loops of the native engine: the
// fp32 and Q8_0 matrix products, the small vector operations around them
// (RMSNorm, softmax, SiLU) and the persistent worker pool that spreads a
// product over the cores.
//
// Every product is defined per output element: out[t][r] is the dot product
// of weight row r with activation row t, reduced in one fixed order that does
// not depend on how many rows or tokens are computed together. A batched
// prefill, a batch of decodes and a single-token step therefore give
// bitwise-equal results, which is what lets prefix caching and KV transfer be
// checked token for token.
//
// Two builds exist. With GOEXPERIMENT=simd on amd64 the products use
// simd/archsimd (AVX2+FMA, checked at run time, with a fallback to the
// portable loops on older CPUs); every other build uses portable Go. The two
// builds reduce in different orders and agree within the tolerance stated in
// the tests, not bitwise.
package kernels
