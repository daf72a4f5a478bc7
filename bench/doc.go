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
//   - Workloads: synthetic lengths (fixed, uniform, normal, lognormal,
//     Zipf) with a shared-prefix ratio; multi-turn conversations; JSONL
//     datasets; the seed reports' prefix-reuse router test and
//     frontend-overhead comparison; Mooncake trace replay with prompts whose
//     blocks follow the trace's hash ids; sweeps of one load variable
//     (concurrency, rate up to saturation, prefix share, length law).
//     Every request is a pure function of its index and the seed, so the
//     same run can be repeated and every target gets the same requests.
//   - Results: a Record per request (TTFT, every inter-token gap, E2E,
//     tokens, cached_tokens, status, error, serving worker), summaries
//     with percentiles and throughput, A/B ratios, prefix-cache hit tables,
//     goodput under an SLO and cost per million good tokens, each target's
//     /metrics scraped during the run, and a report directory: JSONL and CSV
//     records, a summary JSON and a self-contained HTML page with inline SVG
//     charts.
//   - Experiments: a YAML file names one variable and its values; every
//     variant runs in interleaved trials at equal resources, and each figure
//     is a mean with a Student's t 95% interval, with the break-even verdict
//     (goodput ratio against cost ratio). Saved runs compare the same way.
//
// It does not import the server's packages: starting servers (the per-mode
// prefix-reuse table starts one Tandem per router mode, an experiment one
// per variant and trial) goes through the ServerStarter and
// ExperimentStarter hooks the CLI supplies. Failed requests are measurements,
// not reasons to stop: a 500, a dropped connection or a stream cut short is
// recorded with its kind and the run goes on.
package bench
