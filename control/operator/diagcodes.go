package operator

import (
	"github.com/tandemllm/tandem/health"
)

// The package's diagnostic codes (health.Register; docs/ARCHITECTURE.md).
var _ = health.Register(DiagReconcileFailed, DiagReconcileRecovered, DiagAPIUnreachable, DiagAPIReachable)
