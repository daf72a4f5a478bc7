package serve

import (
	"context"
	"net"
	"time"

	"github.com/tandemllm/tandem/disagg"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/nodes/frontend"
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
	// DisaggConfig is the frontend's part: --disagg (auto, the default,
	// always or never), --disagg-interference-weight and
	// --disagg-leg-timeout (0 here: TransferTimeout).
	frontend.DisaggConfig
	// TransferBudget is each worker's staging budget in bytes
	// (--transfer-budget, default 512 MiB).
	TransferBudget int64
	// TransferTimeout bounds one KV transfer (default 60 s).
	TransferTimeout time.Duration
	// ListenHost is where transfer nodes listen (default 127.0.0.1).
	ListenHost string
	// OnDecision hears every decision (tests, benchmarks).
	OnDecision func(disagg.Decision)
	// TransferListen and TransferDial, if set, create the transfer nodes'
	// listeners and outgoing connections (nil: plain TCP), e.g. to put
	// the sockets in other network namespaces (tests).
	TransferListen func(network, addr string) (net.Listener, error)
	TransferDial   func(ctx context.Context, network, addr string) (net.Conn, error)
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
