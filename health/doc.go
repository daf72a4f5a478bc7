// Package health keeps the board of degraded states. Tandem's rule is that
// nothing fails silently: every degraded state (a worker publishing no KV
// events, an event gap, a transfer budget exhausted, ...) is raised here with
// a stable diagnostic code. Raising logs one ERROR/WARN line with the code,
// sets the tandem_diagnostic_active metric, and makes /health report the
// detail until the state is cleared, which logs the recovery.
//
// Every code is a constant that its package registers (Register, in its
// diagcodes.go); cmd/tandem's TestDiagnosticCodesDocumented checks the
// registry against docs/ARCHITECTURE.md's table.
package health
