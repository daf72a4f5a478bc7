// Package bench is Tandem's load generator and benchmark reporter, what
// `tandem bench` runs. It measures any OpenAI-compatible endpoint, Tandem
// or not, through the HTTP API alone, so the figures it produces for
// Tandem are the ones a user would measure for any other stack.
//
// It owns three things:
//
//   - Load: a closed loop (a fixed number of sessions in flight) or an open
//     loop (Poisson arrivals, or a trace's own timestamps), against one or
//     several targets. With several targets every session is sent to each
//     of them in the same run, interleaved, so their ratios are free of
//     run-to-run drift. In an open loop latency counts from the scheduled
//     send time, never from when the tool got round to sending (the
//     coordinated-omission rule); a late tool shows up as latency, not as
//     a quieter server.
//   - Workloads: synthetic lengths (fixed, uniform, normal, lognormal) with
//     a shared-prefix ratio; multi-turn conversations; the seed report's
//     prefix-reuse router test and frontend-overhead comparison; Mooncake
//     trace replay with prompts whose blocks follow the trace's hash ids.
//     Every request is a pure function of its index and the seed, so the
//     same run can be repeated and every target gets the same requests.
//   - Results: a Record per request (TTFT, every inter-token gap, E2E,
//     tokens, cached_tokens, status, error, serving worker), summaries
//     with percentiles and throughput, A/B ratios, prefix-cache hit tables,
//     and a report directory: JSONL and CSV records, a summary JSON and a
//     self-contained HTML page with inline SVG charts.
//
// It does not import the server's packages: starting servers (the per-mode
// prefix-reuse table starts one Tandem per router mode) goes through the
// ServerStarter hook the CLI supplies. Failed requests are measurements,
// not reasons to stop: a 500, a dropped connection or a stream cut short is
// recorded with its kind and the run goes on.
package bench
