package discovery

import (
	"github.com/tandemllm/tandem/health"
)

// The package's diagnostic codes (health.Register; docs/ARCHITECTURE.md).
var _ = health.Register(DiagUnavailable, DiagRecovered, DiagRecordInvalid, DiagIDConflict, DiagJunk, DiagRecordRewritten, DiagKVLayoutMismatch, DiagModelUnserved, DiagTokenizer)
