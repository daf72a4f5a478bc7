// Package sim replays a request trace through a fleet of simulated
// workers with the mocker's timing model, scaled by a planner (or held
// static), to show replicas over time, SLA attainment and worker-seconds
// without running a single process: `tandem planner simulate`.
//
// A simulated worker schedules as engine/mocker does (vLLM's v1 scheduler:
// running sequences first, then waiting ones FIFO under a per-step token
// budget, chunked prefill, prefix-cache hits on whole blocks), and a step
// costs the mocker's TimingModel: prefill_ms(new tokens) plus, when any
// sequence decodes, decode_ms(KV usage). Time is virtual, so a day of
// traffic replays in seconds and every run is deterministic.
//
// Simplifications, each on the pessimistic or neutral side: a sequence
// reserves KV for its whole output at admission (the mocker preempts
// instead), a prefill worker's KV for a prompt is freed once the prompt is
// transferred, and the transfer takes the prompt's KV bytes over a fixed
// bandwidth.
package sim
