// Package disagg decides, request by request, whether a prompt is
// prefilled on the decode worker the router chose or on a dedicated
// prefill worker whose KV is then shipped over the transfer plane
// (kvtransfer), and carries the choice out.
//
// The seed measurements are why this is a decision and not a switch:
// disaggregation made TTFT worse on one host and far worse across 1 GbE
// (docs/benchmarks.md), and both slowdowns were exactly "KV bytes ÷ link
// throughput" plus a prefill the decode worker could have done itself. So the decider prices
// both options with what it can measure:
//
//	local  = prefill(uncached tokens on the decode worker) × (1 + w·running decodes)
//	remote = queue + prefill(uncached on the prefill worker)
//	       + bytes of the blocks the decode worker lacks ÷ measured link throughput
//	       + prefill(the partial tail block, on the decode worker) × (1 + w·running decodes)
//
// The (1 + w·running) factor is the interference a local prefill inflicts
// on the decodes it stalls: with w = 1 each stalled sequence is delayed by
// the whole prefill, so the cost is total delay across requests.
// Only the missing blocks travel: blocks the decode worker's own prefix
// cache holds are never sent.
//
// Workers have a role (aggregated, prefill, decode). The router picks the
// decode worker first, by KV overlap and load, exactly as for aggregated
// serving; this package wraps each decode worker's Generator. Prefill and
// decode workers whose KV layouts differ are never paired
// (kv_layout_mismatch). A failed prefill leg or transfer falls back to
// local prefill: the request still succeeds, and the fallback is logged
// with its code and counted (tandem_disagg_fallbacks_total).
package disagg
