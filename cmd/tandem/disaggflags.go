package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/frontend"
	"github.com/tandemllm/tandem/kvtransfer"
	"github.com/tandemllm/tandem/serve"
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
	f.Var((*byteSize)(&d.TransferBudget), "transfer-budget", "per-worker KV transfer staging memory (e.g. 512MiB, 1GiB, bytes)")
	f.DurationVar(&d.TransferTimeout, "transfer-timeout", kvtransfer.DefaultTimeout, "bound on one KV transfer; a failed transfer falls back to local prefill")
	// Two bounds, two names, the same in every command: --transfer-timeout
	// bounds one KV transfer (serve, worker), --disagg-leg-timeout the whole
	// remote leg, prefill plus transfer (serve, frontend).
}

// byteSize is a flag holding a byte count with an optional binary or
// decimal unit suffix.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }
func (b *byteSize) Type() string   { return "bytes" }

func (b *byteSize) Set(s string) error {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	mult := int64(1)
	num := strings.TrimSpace(s)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 {
		return fmt.Errorf("%q is not a positive size (e.g. 512MiB)", s)
	}
	*b = byteSize(v * float64(mult))
	return nil
}
