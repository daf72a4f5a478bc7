package main

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/nodes/frontend"
	"github.com/tandemllm/tandem/process"
	"github.com/tandemllm/tandem/router"
	"github.com/tandemllm/tandem/tokenizer"
)

func newFrontendCmd() *cobra.Command {
	cfg := frontend.DefaultConfig()
	rf := router.Settings{Mode: cfg.RouterMode}
	disc := discovery.DefaultConfig()
	var modelDir string
	var keyFile string
	var tf tracingFlags
	cmd := &cobra.Command{
		Use:   "frontend",
		Short: "Run the OpenAI frontend and router; workers are found through discovery",
		Long: `Runs the OpenAI-compatible frontend and its router as one process. Workers started with
` + "`tandem worker`" + ` are found through --discovery and added to (and removed from) the router as they
come and go; in --router-mode kv the router follows each worker's KV events.`,
		Args: cobra.NoArgs,
	}
	configPath := addConfigFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		log, err := setUp(cmd, *configPath)
		if err != nil {
			return err
		}
		stopTracing, err := tf.start(cmd.Context(), cfg.HTTPAddr, log)
		if err != nil {
			return err
		}
		defer stopTracing()
		if err := rf.Resolve(); err != nil {
			return err
		}
		cfg.RouterMode, cfg.KV = rf.Mode, rf.KV
		if err := cfg.Frontend.LoadKeyFile(keyFile); err != nil {
			return err
		}
		model, err := tokenizer.Load(modelDir)
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		base := process.New(log, nil, nil)
		metrics, board := base.Registry, base.Board
		reg, err := discovery.Open(disc, discovery.Common{Board: board, Logger: log})
		if err != nil {
			return err
		}
		defer reg.Close()
		f, err := frontend.Start(ctx, cfg, model, frontend.Options{Registry: reg, Board: board, Metrics: metrics, Logger: log})
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "Tandem %s frontend\n  url:       %s/v1\n  model:     %s\n  router:    %s\n  discovery: %s\n",
			version, f.URL(), model.Name, routerDescription(cfg.RouterMode, cfg.KV), disc.Describe())
		if u := f.NATSURL(); u != "" {
			fmt.Fprintf(cmd.OutOrStdout(), "  events:    nats %s\n", u)
		}
		syncOut(cmd)
		var runErr error
		select {
		case <-ctx.Done():
			log.Info("draining", "timeout", cfg.DrainTimeout)
		case runErr = <-f.Done():
			if errors.Is(runErr, http.ErrServerClosed) {
				runErr = nil
			}
		}
		if err := process.Drain(log, cfg.DrainTimeout, f.Shutdown); err != nil {
			return err
		}
		return runErr
	}
	f := cmd.Flags()
	f.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "address of the OpenAI-compatible HTTP server")
	f.StringVar(&modelDir, "model", "", "tokenizer directory of the served model (HF tokenizer.json + tokenizer_config.json, or llama2.c); empty: the built-in tandem-mock")
	process.AddDrainFlag(f, &cfg.DrainTimeout)
	cfg.Frontend.AddFlags(f)
	cfg.Dispatch.AddFlags(f)
	f.BoolVar(&cfg.ShareLoad, "share-load", cfg.ShareLoad, "nats: share the load this frontend routes with the other router replicas, and count theirs")
	cfg.Disagg.AddFlags(f)
	rf.AddFlags(f)
	cfg.Frontend.AddAuthFlags(f, &keyFile, &cfg.TLS)
	cfg.MTLS.AddFlags(cmd.Flags())
	tf.register(cmd, "tandem-frontend")
	disc.AddFlags(cmd.Flags())
	cfg.EventPlane.AddFlags(cmd.Flags())
	return cmd
}
