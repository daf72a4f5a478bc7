package router

import (
	"github.com/tandemllm/tandem/health"
)

// The package's diagnostic codes (health.Register; docs/ARCHITECTURE.md).
var _ = health.Register(DiagTTFTDrift, DiagTTFTRecovered, DiagKVEventsMissing, DiagKVEventsRecovered, DiagKVBlockSize,
	DiagKVEventsLost, DiagKVEventsRebuilt, DiagPredictionDrift, DiagPredictionRecovery)
