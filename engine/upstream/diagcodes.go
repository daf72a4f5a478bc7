package upstream

import (
	"github.com/tandemllm/tandem/health"
)

// The package's diagnostic codes (health.Register; docs/ARCHITECTURE.md).
var _ = health.Register(DiagUnavailable, DiagRecovered, DiagNoCachedTokens, DiagNoKVEvents, DiagMetricsUnavailable, DiagTokenizerMismatch, DiagModelUnknown, DiagDPRanksUnplanned)
