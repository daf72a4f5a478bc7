package httpapi

import (
	"github.com/tandemllm/tandem/health"
)

// Diagnostic codes of the HTTP server's log lines and recoveries (the
// raised ones are declared beside their code).
const (
	// DiagUnsaturated clears DiagSaturated.
	DiagUnsaturated = "frontend_unsaturated"
	// DiagConnAvailable clears DiagConnCap.
	DiagConnAvailable = "frontend_connections_available"
	// DiagBodyBudgetAvailable clears DiagBodyBudget.
	DiagBodyBudgetAvailable = "frontend_body_budget_available"
	// DiagWorkerProgressing clears DiagWorkerStuck.
	DiagWorkerProgressing = "worker_progressing"
	// DiagWorkerReachable clears DiagWorkerUnreachable.
	DiagWorkerReachable = "worker_reachable"
	// DiagWorkerRetry (log): a worker failed before the first token; the
	// request moved on.
	DiagWorkerRetry = "worker_retry"
	// DiagRequestMigrated (log): a worker failed after the first token;
	// the stream continued on another.
	DiagRequestMigrated = "request_migrated"
	// DiagStreamInterrupted (log and SSE error event): a stream broke after
	// its first token.
	DiagStreamInterrupted = "stream_interrupted"
	// DiagLogprobsMissing (log): an engine sent tokens without the
	// logprobs the request asked for; those positions read -9999.
	DiagLogprobsMissing = "logprobs_missing"
)

// The package's diagnostic codes (health.Register; docs/ARCHITECTURE.md).
var _ = health.Register(DiagSaturated, DiagUnsaturated, DiagConnCap, DiagConnAvailable, DiagBodyBudget,
	DiagBodyBudgetAvailable, DiagWorkerStuck, DiagWorkerProgressing, DiagWorkerUnreachable, DiagWorkerReachable,
	DiagWorkerRetry, DiagRequestMigrated, DiagStreamInterrupted, DiagLogprobsMissing)
