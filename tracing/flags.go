package tracing

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/pflag"
)

// AddFlags registers the OpenTelemetry flags of serve, frontend and
// worker. Service and Instance are the command's to set.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Endpoint, "otlp-endpoint", "", "export traces over OTLP/gRPC to this collector (Jaeger, OpenTelemetry Collector): host:port (TLS unless loopback), https://host:port, or http://host:port (plaintext); empty: no export, traceparent still propagated")
	fs.Float64Var(&c.SampleRatio, "trace-sample-ratio", 1, "share of new traces kept (0..1); a request whose client sent a traceparent follows its sampled flag")
	fs.StringVar(&c.CAFile, "otlp-ca-file", "", "CA bundle that verifies the OTLP collector's certificate (default: the system roots)")
}

// StartProcess installs tracing for this process as Start does; stop
// flushes buffered spans, waiting at most 5 s (a collector that is gone
// must not hold up the exit) and logging a failed flush.
func StartProcess(ctx context.Context, cfg Config, log *slog.Logger) (stop func(), err error) {
	shutdown, err := Start(ctx, cfg, log)
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
