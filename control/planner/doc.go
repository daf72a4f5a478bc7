// Package planner sizes the worker pools of a deployment (prefill, decode,
// or aggregated) so that the time to first token and the inter-token
// latency stay under their targets with the fewest workers.
//
// Every interval the planner takes an Observation (request rate, input and
// output lengths, prefix-cache hit fraction, observed TTFT and ITL
// quantiles, current replicas), feeds the load into a Predictor (constant,
// moving average or Holt's linear trend), asks a Policy how many workers
// each pool needs for the predicted load, and passes the proposal through
// the stability rules (min/max, cooldowns, one step down per interval)
// before an Actuator applies it.
//
// The performance model is a Profile (written by `tandem bench profile`, or
// derived from the mocker's timing model) interpolated on its grids and
// corrected online by the ratio of observed to predicted latencies, as
// NVIDIA Dynamo's SLA planner corrects its interpolators
// (https://github.com/ai-dynamo/dynamo, docs/architecture/sla_planner.md).
// Two policies share the model: Dynamo's throughput formulas (the
// baseline) and Tandem's, which sizes for the latency quantile with a
// queueing model, counts only the uncached part of a prompt, and leaves
// room for the load's variance.
package planner
