// Package accuracy checks the kv router's predictions against what the
// engines report, per worker, each check with its own lock:
//
//   - Prefix: the predicted cached prefix (blocks) against the engine's
//     cached_tokens, over the worker's last requests. When too few are
//     within one block the router's picture of the worker's cache is wrong,
//     whatever the cause (lost events, an engine that evicts more than the
//     router thinks, a tokenizer mismatch): kv_prediction_drift.
//   - TTFT: the predicted time to first token against the observed one, over
//     the worker's last TTFTWindow first tokens: ttft_model_drift, while
//     which decisions that include the worker fall back to the weighted cost.
//
// The checks decide when to raise and when to clear; the router raises the
// diagnostics, exports the metrics and acts on them. The package knows no
// worker, index or request type, so it reads in one sitting.
package accuracy
