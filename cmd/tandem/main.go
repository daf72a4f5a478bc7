package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/tracing"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "tandem:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "tandem",
		Short:         "Tandem serves LLMs across many workers with KV-cache-aware routing",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("log-level", "info", "log level: debug, info, warn, error")
	root.AddCommand(newServeCmd(), newFrontendCmd(), newWorkerCmd(), newModelCmd(), newCertsCmd(), newBenchCmd(), newOperatorCmd(), newPlannerCmd(), newVersionCmd(), newDoctorCmd())
	polishHelp(root)
	return root
}

func newLogger(cmd *cobra.Command) (*slog.Logger, error) {
	lvl, _ := cmd.Flags().GetString("log-level")
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(lvl))); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	// Lines logged with a request's context carry its trace and span ids.
	return slog.New(tracing.LogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))), nil
}
