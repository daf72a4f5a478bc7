package eventplane

import (
	"github.com/tandemllm/tandem/health"
)

// The package's diagnostic codes (health.Register; docs/ARCHITECTURE.md).
var _ = health.Register(DiagDisconnected, DiagReconnected, DiagRelayLoss)
