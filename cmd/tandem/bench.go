package main

import "github.com/spf13/cobra"

// newBenchCmd is replaced by the bench implementation.
func newBenchCmd() *cobra.Command {
	return &cobra.Command{Use: "bench", Short: "Load generator (not yet implemented)", Hidden: true}
}
