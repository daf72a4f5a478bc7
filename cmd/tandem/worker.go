package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/serve"
)

func newWorkerCmd() *cobra.Command {
	cfg := serve.DefaultConfig()
	cfg.Workers = 1
	var eng engineFlags
	var id string
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run one worker; with --openai-addr it serves the OpenAI API the way a vLLM server does",
		Long: `Runs one engine. With --openai-addr the worker answers the OpenAI API itself, like a vLLM
server: token-id prompts, usage with cached tokens, vllm:-named Prometheus metrics on /metrics,
and (mocker) vLLM KV events over ZMQ. Other routers can be tested against it as if it were vLLM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd)
			if err != nil {
				return err
			}
			if cfg.HTTPAddr == "" {
				return errors.New("--openai-addr is required (the multi-process request plane comes with discovery)")
			}
			model, factory, err := eng.build(log)
			if err != nil {
				return err
			}
			cfg.WorkerIDs = []string{id}
			sys, err := serve.Start(cfg, model, factory, log)
			if err != nil {
				return err
			}
			w := sys.Workers[0]
			fmt.Fprintf(cmd.OutOrStdout(), "Tandem worker %s (%s engine)\n  url:     %s/v1\n  model:   %s\n", w.ID, w.Info.Kind, sys.URL(), model.Name)
			if ep := kvEndpoint(sys); ep != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "  kv-events: %s\n", ep)
			}
			select {
			case <-cmd.Context().Done():
			case err := <-sys.Done():
				if !errors.Is(err, http.ErrServerClosed) {
					return err
				}
			}
			dctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
			defer cancel()
			if err := sys.Shutdown(dctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.HTTPAddr, "openai-addr", "", "address of the worker's own OpenAI-compatible (vLLM-style) HTTP server")
	f.StringVar(&id, "id", "worker-0", "worker id (reported in X-Tandem-Worker)")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "how long in-flight requests may take to finish on SIGTERM")
	eng.register(cmd)
	return cmd
}

// kvEndpoint reports where worker 0 publishes KV events, if its engine does.
func kvEndpoint(sys *serve.System) string {
	if e, ok := sys.Engine(0).(interface{ KVEventsEndpoint() string }); ok {
		return e.KVEventsEndpoint()
	}
	return ""
}
