package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/serve"
)

func newServeCmd() *cobra.Command {
	cfg := serve.DefaultConfig()
	var eng engineFlags
	var rf routerFlags
	var auth clientAuthFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the whole system (frontend, router, workers) in one process",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd)
			if err != nil {
				return err
			}
			model, factory, err := eng.build(log)
			if err != nil {
				return err
			}
			if eng.kind == "upstream" {
				cfg.Workers, cfg.PDPrefillWorkers = len(eng.up.urls), len(eng.up.prefill)
			} else if len(eng.up.prefill) > 0 {
				return errors.New("--upstream-prefill needs --engine upstream")
			}
			if err := rf.apply(&cfg.RouterMode, &cfg.KV); err != nil {
				return err
			}
			if err := auth.apply(); err != nil {
				return err
			}
			sys, err := serve.Start(cfg, model, factory, log)
			if err != nil {
				return err
			}
			printBanner(cmd.OutOrStdout(), sys, model.Name, cfg.RouterMode)
			ctx := cmd.Context()
			select {
			case <-ctx.Done():
				log.Info("draining", "timeout", cfg.DrainTimeout)
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
			log.Info("stopped")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "address of the OpenAI-compatible HTTP server")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "number of in-process workers")
	f.StringVar(&cfg.RequestPlane, "request-plane", cfg.RequestPlane, "how the frontend reaches workers: inproc or grpc (loopback)")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "how long in-flight requests may take to finish on SIGTERM/Ctrl-C")
	f.Int64Var(&cfg.Frontend.MaxBodyBytes, "max-body-bytes", cfg.Frontend.MaxBodyBytes, "largest accepted request body")
	auth.register(cmd, &cfg.Frontend, &cfg.TLS)
	f.IntVar(&cfg.Frontend.MaxRetries, "max-retries", cfg.Frontend.MaxRetries, "other workers to try when a worker fails before the first token")
	eng.register(cmd)
	f.StringArrayVar(&eng.up.prefill, "upstream-prefill", nil, "upstream: a vLLM prefill server (NixlConnector); with any, the router drives vLLM's P/D protocol: prefill leg here, decode leg on the --upstream server it picks")
	rf.register(cmd, cfg.RouterMode)
	registerDisaggFlags(cmd, &cfg)
	return cmd
}

func printBanner(w io.Writer, sys *serve.System, model, mode string) {
	var ids []string
	kind := ""
	for _, wk := range sys.Workers {
		ids = append(ids, wk.ID)
		kind = wk.Info.Kind
	}
	shown := strings.Join(ids, ", ")
	if len(ids) > 8 {
		shown = strings.Join(ids[:4], ", ") + fmt.Sprintf(", … (%d in all)", len(ids))
	}
	fmt.Fprintf(w, "Tandem %s serving\n  url:     %s/v1\n  model:   %s\n  router:  %s\n  workers: %d × %s engine (%s)\n",
		version, sys.URL(), model, mode, len(ids), kind, shown)
	if f, ok := w.(*os.File); ok {
		_ = f.Sync()
	}
}
