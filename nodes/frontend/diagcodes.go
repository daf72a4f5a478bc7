package frontend

import (
	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/process"
)

// DiagDrainTimeout (log): in-flight requests outlived --drain-timeout and
// were cut (worker.DiagDrainTimeout is the same code).
const DiagDrainTimeout = process.DiagDrainTimeout

// The package's diagnostic codes (health.Register; docs/ARCHITECTURE.md);
// authn's, which this package raises, with them (authn sits below health).
var _ = health.Register(DiagKVLayoutMismatch, DiagModelUnserved, DiagTokenizer, DiagWorkerRefused, DiagNoTransferAddr,
	DiagNoPrefill, DiagDrainTimeout, authn.DiagOpenPlane)
