package dispatch

import "github.com/tandemllm/tandem/health"

// Diagnostic codes of a request's life past admission.
const (
	// DiagWorkerStuck: a worker holds requests but has produced nothing for
	// the router's stuck threshold; the router skips it until it progresses.
	DiagWorkerStuck = "worker_stuck"
	// DiagWorkerProgressing clears DiagWorkerStuck.
	DiagWorkerProgressing = "worker_progressing"
	// DiagWorkerUnreachable: requests could not reach a worker that is still
	// registered (dead before its record expired, its server down); the
	// router quarantines it, for longer with every failure in a row.
	DiagWorkerUnreachable = "worker_unreachable"
	// DiagWorkerReachable clears DiagWorkerUnreachable.
	DiagWorkerReachable = "worker_reachable"
	// DiagWorkerRetry (log): a worker failed before the first token; the
	// request moved on.
	DiagWorkerRetry = "worker_retry"
	// DiagRequestMigrated (log): a worker failed after the first token;
	// the stream continued on another.
	DiagRequestMigrated = "request_migrated"
)

// The package's diagnostic codes (health.Register; docs/ARCHITECTURE.md).
var _ = health.Register(DiagWorkerStuck, DiagWorkerProgressing, DiagWorkerUnreachable, DiagWorkerReachable,
	DiagWorkerRetry, DiagRequestMigrated)
