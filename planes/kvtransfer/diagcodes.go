package kvtransfer

import (
	"github.com/tandemllm/tandem/health"
)

// Recovery codes, logged when a transfer diagnostic clears.
const (
	// CodeRecovered: transfers on a link that failed succeed again.
	CodeRecovered = "kv_transfer_recovered"
	// CodeAccepted: the receiver accepted a transfer after refusing one.
	CodeAccepted = "kv_transfer_accepted"
)

// The package's diagnostic codes (health.Register; docs/ARCHITECTURE.md).
var _ = health.Register(CodePrefillFailed, CodeFailed, CodeTimeout, CodeLayoutMismatch, CodeRejected,
	CodeRefusedPeer, CodeRecovered, CodeAccepted)
