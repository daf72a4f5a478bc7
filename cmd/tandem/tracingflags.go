package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/tracing"
)

// tracingFlags are the OpenTelemetry flags of serve, frontend and worker.
type tracingFlags struct{ cfg tracing.Config }

func (t *tracingFlags) register(cmd *cobra.Command, service string) {
	t.cfg.Service = service
	f := cmd.Flags()
	f.StringVar(&t.cfg.Endpoint, "otlp-endpoint", "", "export traces over OTLP/gRPC to this collector (Jaeger, OpenTelemetry Collector): host:port (TLS unless loopback), https://host:port, or http://host:port (plaintext); empty: no export, traceparent still propagated")
	f.Float64Var(&t.cfg.SampleRatio, "trace-sample-ratio", 1, "share of new traces kept (0..1); a request whose client sent a traceparent follows its sampled flag")
	f.StringVar(&t.cfg.CAFile, "otlp-ca-file", "", "CA bundle that verifies the OTLP collector's certificate (default: the system roots)")
}

// start installs tracing for this process; stop flushes buffered spans
// (at most 5 s: a collector that is gone must not hold up the exit).
func (t *tracingFlags) start(ctx context.Context, instance string, log *slog.Logger) (stop func(), err error) {
	t.cfg.Instance = instance
	shutdown, err := tracing.Start(ctx, t.cfg, log)
	if err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("flushing traces", "err", err)
		}
	}, nil
}
