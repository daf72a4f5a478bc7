package serve

import (
	"github.com/tandemllm/tandem/health"
)

// DiagDrainTimeout (log): in-flight requests outlived --drain-timeout and
// were cut (worker.DiagDrainTimeout is the same code).
const DiagDrainTimeout = "drain_timeout"

// The package's diagnostic codes (health.Register; docs/ARCHITECTURE.md).
var _ = health.Register(DiagDrainTimeout)
