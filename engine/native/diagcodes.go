package native

import "github.com/tandemllm/tandem/health"

// The KV offload tiers' diagnostic codes (health.Register;
// docs/ARCHITECTURE.md): a disk tier file that could not be read back or
// verified, or written, degrades that block to recompute.
const (
	DiagKVTierReadFailed  = "kv_tier_read_failed"
	DiagKVTierWriteFailed = "kv_tier_write_failed"
)

var _ = health.Register(DiagKVTierReadFailed, DiagKVTierWriteFailed)
