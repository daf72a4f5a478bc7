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

	"github.com/tandemllm/tandem/nodes/serve"
	"github.com/tandemllm/tandem/nodes/serve/launch"
	"github.com/tandemllm/tandem/process"
)

// newServeSetup registers the flags of `tandem serve` on cmd: serve's
// own, then each part's (the frontend's limits and client auth, the
// engines, the router, disaggregation).
func newServeSetup(cmd *cobra.Command) *launch.Setup {
	s := launch.New()
	cfg := &s.Config
	f := cmd.Flags()
	f.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "address of the OpenAI-compatible HTTP server")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "number of in-process workers")
	f.StringVar(&cfg.RequestPlane, "request-plane", cfg.RequestPlane, "how the frontend reaches workers: inproc or grpc (loopback)")
	process.AddDrainFlag(f, &cfg.DrainTimeout)
	f.StringVar(&cfg.ServedModelName, "served-model-name", "", "the model's name on the OpenAI API (empty: the tokenizer's, or with --engine upstream the name the servers' /v1/models lists)")
	cfg.Frontend.AddFlags(f)
	cfg.Dispatch.AddFlags(f)
	cfg.Frontend.AddAuthFlags(f, &s.KeyFile, &cfg.TLS)
	s.Engine.AddFlags(f)
	s.Engine.Up.AddPrefillFlag(f)
	s.Router.AddFlags(f)
	registerDisaggFlags(cmd, cfg)
	return s
}

func newServeCmd() *cobra.Command {
	var setup *launch.Setup
	var tf tracingFlags
	var auto autoscaleFlags // planner_live.go
	var learn learnFlags    // learnprofile.go
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the whole system (frontend, router, workers) in one process",
		Args:  cobra.NoArgs,
	}
	configPath := addConfigFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		log, err := setUp(cmd, *configPath)
		if err != nil {
			return err
		}
		stopTracing, err := tf.start(cmd.Context(), "serve", log)
		if err != nil {
			return err
		}
		defer stopTracing()
		if learn.Base == "" && auto.on {
			learn.Base = auto.pf.Profile // unlearned cells: the planner's own profile
		}
		if err := learn.attach(setup); err != nil {
			return err
		}
		sys, model, err := setup.Start(log)
		if err != nil {
			return err
		}
		if err := learn.start(log, sys.Board); err != nil {
			_ = sys.Shutdown(context.Background())
			return err
		}
		defer learn.finish()
		cfg := setup.Config
		printBanner(cmd.OutOrStdout(), sys, model, routerDescription(cfg.RouterMode, cfg.KV))
		ctx := cmd.Context()
		auto.pf.ProfileSource = learn.source()
		waitPlanner, err := auto.start(ctx, sys, log, cmd.OutOrStdout())
		if err != nil {
			_ = sys.Shutdown(context.Background())
			return err
		}
		select {
		case <-ctx.Done():
			log.Info("draining", "timeout", cfg.DrainTimeout)
		case err := <-sys.Done():
			if !errors.Is(err, http.ErrServerClosed) {
				return err
			}
		}
		waitPlanner()
		if err := process.Drain(log, cfg.DrainTimeout, sys.Shutdown); err != nil {
			return err
		}
		learn.finish() // after the drain: its steps count
		return nil
	}
	setup = newServeSetup(cmd)
	tf.register(cmd, "tandem")
	auto.register(cmd)
	learn.AddFlags(cmd.Flags())
	return cmd
}

func printBanner(w io.Writer, sys *serve.System, model, mode string) {
	var ids []string
	kind := ""
	for _, wk := range sys.Workers {
		ids = append(ids, wk.ID)
		kind = wk.Info.Kind
	}
	if len(sys.Workers) > 0 && sys.Workers[0].Info.Model != "" {
		// The name the API serves (--served-model-name, or the one an
		// upstream's /v1/models lists), as /v1/models shows it.
		model = sys.Workers[0].Info.Model
	}
	shown := strings.Join(ids, ", ")
	if len(ids) > 8 {
		shown = strings.Join(ids[:4], ", ") + fmt.Sprintf(", … (%d in all)", len(ids))
	}
	fmt.Fprintf(w, "Tandem %s serving\n  url:     %s/v1\n  model:   %s\n  router:  %s\n  workers: %d × %s engine (%s)\n",
		version, sys.URL(), model, mode, len(ids), kind, shown)
	if p := sys.PrefillWorkers(); len(p) > 0 {
		fmt.Fprintf(w, "  prefill: %d × %s engine (%s); the workers above decode\n", len(p), kind, strings.Join(p, ", "))
	}
	if f, ok := w.(*os.File); ok {
		_ = f.Sync()
	}
}
