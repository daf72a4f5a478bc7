package main

import (
	"context"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/tracing"
)

// tracingFlags are the OpenTelemetry flags of serve, frontend and worker.
type tracingFlags struct{ cfg tracing.Config }

func (t *tracingFlags) register(cmd *cobra.Command, service string) {
	t.cfg.Service = service
	t.cfg.AddFlags(cmd.Flags())
}

// start installs tracing for this process, as instance.
func (t *tracingFlags) start(ctx context.Context, instance string, log *slog.Logger) (stop func(), err error) {
	t.cfg.Instance = instance
	return tracing.StartProcess(ctx, t.cfg, log)
}
