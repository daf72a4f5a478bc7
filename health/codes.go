package health

import (
	"slices"
	"sync"
)

// The registry of diagnostic codes. Every package that raises, clears or
// logs a diagnostic code registers it here, beside its declaration:
//
//	var _ = health.Register(DiagFoo, DiagFooRecovered)
//
// cmd/tandem's TestDiagnosticCodesDocumented links every package and checks
// that the registered codes and the table in docs/ARCHITECTURE.md are the
// same set, both ways, and that no Raise, Clear or "diagnostic_code" log
// attribute is given a string literal: a code exists only as a registered
// constant.
var registry struct {
	mu    sync.Mutex
	codes map[string]struct{}
}

// Register adds codes to the registry (registering one twice is harmless:
// kv_layout_mismatch is raised by two packages). It returns a value so it
// can run in a package-level var declaration.
func Register(codes ...string) struct{} {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.codes == nil {
		registry.codes = map[string]struct{}{}
	}
	for _, c := range codes {
		registry.codes[c] = struct{}{}
	}
	return struct{}{}
}

// Registered returns every registered code, sorted.
func Registered() []string {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	out := make([]string, 0, len(registry.codes))
	for c := range registry.codes {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}
