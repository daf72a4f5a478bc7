package main

import (
	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/engine/engines"
	"github.com/tandemllm/tandem/nodes/frontend"
	"github.com/tandemllm/tandem/nodes/serve"
	"github.com/tandemllm/tandem/planes/kvtransfer"
)

// registerDisaggFlags adds the disaggregated-prefill flags of `tandem serve`.
func registerDisaggFlags(cmd *cobra.Command, cfg *serve.Config) {
	d := &cfg.Disagg
	d.DisaggConfig = frontend.DefaultDisaggConfig()
	d.TransferBudget = kvtransfer.DefaultBudget
	f := cmd.Flags()
	f.IntVar(&d.PrefillWorkers, "prefill-workers", 0, "in-process prefill workers (> 0 enables disaggregated prefill over loopback TCP)")
	f.IntVar(&d.DecodeWorkers, "decode-workers", 0, "in-process decode workers when --prefill-workers > 0 (0: --workers)")
	d.DisaggConfig.AddFlags(f)
	f.Var((*engines.ByteSize)(&d.TransferBudget), "transfer-budget", "per-worker KV transfer staging memory (e.g. 512MiB, 1GiB, bytes)")
	f.DurationVar(&d.TransferTimeout, "transfer-timeout", kvtransfer.DefaultTimeout, "bound on one KV transfer; a failed transfer falls back to local prefill")
	// Two bounds, two names, the same in every command: --transfer-timeout
	// bounds one KV transfer (serve, worker), --disagg-leg-timeout the whole
	// remote leg, prefill plus transfer (serve, frontend).
}
