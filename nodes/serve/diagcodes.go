package serve

import (
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/process"
)

// DiagDrainTimeout (log): in-flight requests outlived --drain-timeout and
// were cut (worker.DiagDrainTimeout is the same code).
const DiagDrainTimeout = process.DiagDrainTimeout

// The package's diagnostic codes (health.Register; docs/ARCHITECTURE.md).
var _ = health.Register(DiagDrainTimeout)
