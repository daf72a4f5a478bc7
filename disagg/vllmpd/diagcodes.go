package vllmpd

import (
	"github.com/tandemllm/tandem/health"
)

// Diagnostic codes of the vLLM P/D drivers' log lines.
const (
	// DiagPrefillFailed: the proxy's prefill leg failed; the decode
	// server prefills the prompt.
	DiagPrefillFailed = "vllmpd_prefill_failed"
	// DiagPullFailed: the decode worker could not pull the prefilled KV;
	// it prefills locally.
	DiagPullFailed = "vllmpd_pull_failed"
	// DiagPeerRefused: a decode leg's kv_transfer_params named a side
	// channel outside --kv-transfer-peers; nothing was sent there and
	// the worker prefills locally.
	DiagPeerRefused = "vllmpd_peer_refused"
)

// The package's diagnostic codes (health.Register; docs/ARCHITECTURE.md).
var _ = health.Register(DiagPrefillFailed, DiagPullFailed, DiagPeerRefused)
