package requestplane

import (
	"github.com/tandemllm/tandem/health"
)

// DiagSchemaMatch clears DiagSchemaMismatch: no peer of an older release
// called for a while.
const DiagSchemaMatch = "request_plane_schema_match"

// The package's diagnostic codes (health.Register; docs/ARCHITECTURE.md).
var _ = health.Register(DiagSchemaMismatch, DiagSchemaMatch)
