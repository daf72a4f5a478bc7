package main

import (
	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/disagg"
	"github.com/tandemllm/tandem/nodes/serve"
)

// registerDisaggFlags adds the disaggregated-prefill flags of `tandem serve`.
func registerDisaggFlags(cmd *cobra.Command, cfg *serve.Config) {
	d := &cfg.Disagg
	d.Settings = disagg.DefaultSettings()
	f := cmd.Flags()
	f.IntVar(&d.PrefillWorkers, "prefill-workers", 0, "in-process prefill workers (> 0 enables disaggregated prefill over loopback TCP)")
	f.IntVar(&d.DecodeWorkers, "decode-workers", 0, "in-process decode workers when --prefill-workers > 0 (0: --workers)")
	d.Settings.AddFlags(f)
	d.Transfer.AddFlags(f, "per-worker ", "")
	// Two bounds, two names, the same in every command: --transfer-timeout
	// bounds one KV transfer (serve, worker), --disagg-leg-timeout the whole
	// remote leg, prefill plus transfer (serve, frontend).
}
