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
	// DiagStreamInterrupted (log and SSE error event): a stream broke after
	// its first token.
	DiagStreamInterrupted = "stream_interrupted"
	// DiagLogprobsMissing (log): an engine sent tokens without the
	// logprobs the request asked for; those positions read -9999.
	DiagLogprobsMissing = "logprobs_missing"
)

// The package's diagnostic codes (health.Register; docs/ARCHITECTURE.md).
var _ = health.Register(DiagSaturated, DiagUnsaturated, DiagConnCap, DiagConnAvailable, DiagBodyBudget,
	DiagBodyBudgetAvailable, DiagStreamInterrupted, DiagLogprobsMissing)
