package worker

import (
	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/health"
)

// The package's diagnostic codes (health.Register; docs/ARCHITECTURE.md);
// authn's, which this package raises, with them (authn sits below health).
var _ = health.Register(authn.DiagOpenPlane)
