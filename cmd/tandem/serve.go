package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/engine/engines"
	"github.com/tandemllm/tandem/process"
	"github.com/tandemllm/tandem/router"
	"github.com/tandemllm/tandem/serve"
)

// serveSetup is the configuration of `tandem serve`: its flags and how
// to start the system they describe. `tandem bench --serve` and bench
// experiments start servers through it, so a started variant is exactly
// the `tandem serve` with the same flags.
type serveSetup struct {
	cfg serve.Config
	eng engines.Config
	rf  router.Settings
	// keyFile is --api-key-file, read at start.
	keyFile string
}

// newServeSetup registers the flags of `tandem serve` on cmd.
func newServeSetup(cmd *cobra.Command) *serveSetup {
	s := &serveSetup{cfg: serve.DefaultConfig()}
	cfg := &s.cfg
	f := cmd.Flags()
	f.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "address of the OpenAI-compatible HTTP server")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "number of in-process workers")
	f.StringVar(&cfg.RequestPlane, "request-plane", cfg.RequestPlane, "how the frontend reaches workers: inproc or grpc (loopback)")
	process.AddDrainFlag(f, &cfg.DrainTimeout)
	f.StringVar(&cfg.ServedModelName, "served-model-name", "", "the model's name on the OpenAI API (empty: the tokenizer's, or with --engine upstream the name the servers' /v1/models lists)")
	cfg.Frontend.AddFlags(f)
	cfg.Frontend.AddAuthFlags(f, &s.keyFile, &cfg.TLS)
	s.eng.AddFlags(cmd.Flags())
	s.eng.Up.AddPrefillFlag(f)
	s.rf.Mode = cfg.RouterMode
	s.rf.AddFlags(f)
	registerDisaggFlags(cmd, cfg)
	return s
}

// start builds the engines and starts the system.
func (s *serveSetup) start(log *slog.Logger) (*serve.System, string, error) {
	model, factory, err := s.eng.Build(log)
	if err != nil {
		return nil, "", err
	}
	if s.eng.Kind == "upstream" {
		if err := s.eng.Up.ResolveTargets(context.Background()); err != nil {
			return nil, "", err
		}
		s.cfg.Workers, s.cfg.PDPrefillWorkers = s.eng.Up.Workers(), len(s.eng.Up.Prefill)
	} else if len(s.eng.Up.Prefill) > 0 {
		return nil, "", errors.New("--upstream-prefill needs --engine upstream")
	}
	if err := s.rf.Resolve(); err != nil {
		return nil, "", err
	}
	s.cfg.RouterMode, s.cfg.KV = s.rf.Mode, s.rf.KV
	if err := s.cfg.Frontend.LoadKeyFile(s.keyFile); err != nil {
		return nil, "", err
	}
	sys, err := serve.Start(s.cfg, model, factory, log)
	if err != nil {
		return nil, "", err
	}
	return sys, model.Name, nil
}

func newServeCmd() *cobra.Command {
	var setup *serveSetup
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
			learn.Base = auto.pf.profile // unlearned cells: the planner's own profile
		}
		if err := learn.attach(setup); err != nil {
			return err
		}
		sys, model, err := setup.start(log)
		if err != nil {
			return err
		}
		if err := learn.start(log, sys.Board); err != nil {
			_ = sys.Shutdown(context.Background())
			return err
		}
		defer learn.finish()
		cfg := setup.cfg
		printBanner(cmd.OutOrStdout(), sys, model, routerDescription(cfg.RouterMode, cfg.KV))
		ctx := cmd.Context()
		auto.pf.profileSource = learn.source()
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
