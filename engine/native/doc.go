// Package native is Tandem's built-in inference engine: a Llama-family
// transformer run in Go on the CPU, behind the engine.Engine interface, so
// a Tandem deployment produces real tokens and real KV bytes on any
// machine, with no GPU and no external server.
//
// It owns the scheduler (continuous batching of decodes and chunked
// prefills in one forward step), sampling, the binding of the model's
// paged K/V store to the shared kvcache block manager (prefix caching and
// the KV events the router consumes), KV export/import in the byte layout
// of docs/kv-layout.md, and model loading (Load, LoadModel). The numeric
// work lives in the subpackages: model (weights, loaders, forward pass,
// random-weight generator) and kernels (products and the worker pool).
//
// Determinism is a design goal, not an accident: every token's logits and
// K/V bytes are bitwise independent of how the scheduler batched it, so a
// prefix-cached run, a run on imported KV and a plain run give the same
// tokens, which is what the disaggregation and routing tests check.
package native
