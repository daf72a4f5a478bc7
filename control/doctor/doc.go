// Package doctor is `tandem doctor`: the seeds' operational checklist, run
// against a live deployment instead of by hand. It reads what the
// deployment already publishes (the frontend's /health and /metrics, the
// discovery records, each worker's /metrics and /health) and turns it into
// checks, each with a stable ID, a verdict (ok, warn, fail), the evidence
// it read and one concrete fix.
//
// It only reads: every network call is a GET or a TCP connect, bounded by a
// timeout and by a size limit on what it reads, and it authenticates the
// way the deployment's other clients do (an API key for the frontend, a
// cluster certificate for workers' mTLS ports), so that running it changes
// nothing and needs no new opening. The one exception is opt-in: Probe
// sends a synthetic prompt (random words, never user data) twice through
// the frontend's OpenAI API, costing two one-token requests, to see prefix
// reuse and the TTFT the frontend adds. On the deployment's host it also
// reads /proc for leftover Tandem processes and their listening ports.
package doctor
