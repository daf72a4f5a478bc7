// Package model owns the Llama-family decoder: its configuration, its
// weights in memory, the loaders that fill them (llama2.c checkpoints and
// GGUF files), the deterministic random-weight generator used for
// benchmarks, and the forward pass over a paged key/value store.
//
// The forward pass processes a batch of sequence chunks at once (prefill
// chunks and single decode tokens together). Every per-token computation,
// including attention, is done the same way whatever the batch holds, so a
// token's logits and K/V bytes are bitwise identical whether it was computed
// alone, in a prefill, or next to other sequences.
package model
