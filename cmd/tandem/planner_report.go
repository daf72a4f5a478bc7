package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tandemllm/tandem/control/planner/sim"
)

// addSimulateHTMLFlag registers `planner simulate --html FILE`.
func addSimulateHTMLFlag(f *pflag.FlagSet) {
	f.String("html", "", "also write a self-contained HTML report (replicas over time per pool, load, SLA attainment, worker-seconds per policy) to this file")
}

// writeSimulateHTML writes the comparison's HTML report where --html
// says; nothing when it is empty. The page is rendered in memory first so
// a failure leaves no half-written file.
func writeSimulateHTML(cmd *cobra.Command, cmp *sim.Comparison) error {
	path, err := cmd.Flags().GetString("html")
	if err != nil || path == "" {
		return nil
	}
	var b bytes.Buffer
	if err := cmp.WriteHTML(&b); err != nil {
		return err
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", path)
	return nil
}
