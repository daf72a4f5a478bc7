package serve

import (
	"github.com/tandemllm/tandem/disagg"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/planes/kvtransfer"
)

// DisaggConfig configures disaggregated prefill in one process: prefill
// worker nodes outside the router, decode worker nodes inside it, each
// with its transfer-plane node speaking real TCP on loopback, so the bytes
// move exactly as they would between hosts; the frontend node's
// orchestrator drives them as `tandem frontend`'s does.
type DisaggConfig struct {
	// PrefillWorkers > 0 enables disaggregation (--prefill-workers).
	PrefillWorkers int
	// DecodeWorkers replaces Config.Workers when > 0 (--decode-workers).
	DecodeWorkers int
	// Settings are the frontend node's part: --disagg (auto, the default,
	// always or never), --disagg-interference-weight and
	// --disagg-leg-timeout (0 here: TransferTimeout).
	disagg.Settings
	// Transfer configures each worker's KV transfer node
	// (--transfer-budget, default 512 MiB; --transfer-timeout, default
	// 60 s).
	Transfer kvtransfer.Settings
	// ListenHost is where transfer nodes listen (default 127.0.0.1).
	ListenHost string
	// OnDecision hears every decision (tests, benchmarks).
	OnDecision func(disagg.Decision)
}

// Enabled reports whether any prefill worker is configured.
func (c DisaggConfig) Enabled() bool { return c.PrefillWorkers > 0 }

// PrefillWorkers lists the ids of the prefill workers (none when
// disaggregation is off).
func (s *System) PrefillWorkers() []string {
	if !s.cfg.Disagg.Enabled() {
		return nil
	}
	var ids []string
	for _, n := range s.prefill {
		ids = append(ids, n.id)
	}
	return ids
}

// PrefillEngine returns prefill worker i's engine.
func (s *System) PrefillEngine(i int) engine.Engine { return s.prefill[i].eng }
