// Package launch starts `tandem serve`'s system from its configuration:
// the engines built from their flags, upstream servers resolved, the
// router's settings and the API keys read, then serve.Start. The serve
// command, `tandem bench --serve`, bench experiments and bench
// prefix-reuse --start-server all start servers through it, so a started
// variant is exactly the `tandem serve` with the same flags. It returns
// URLs: the bench that starts servers still talks to them over HTTP only.
package launch

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/tandemllm/tandem/engine/engines"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/nodes/serve"
	"github.com/tandemllm/tandem/router"
)

// Setup is the configuration of `tandem serve`, as its flags fill it.
type Setup struct {
	// Config is the system's configuration; Start fills Workers and
	// PDPrefillWorkers for --engine upstream, RouterMode and KV from
	// Router, and Frontend.APIKeys from KeyFile.
	Config serve.Config
	// Engine chooses and builds the workers' engines.
	Engine engines.Config
	// Router is the routing flags; Router.Mode's default is
	// Config.RouterMode's.
	Router router.Settings
	// KeyFile is --api-key-file, read by Start.
	KeyFile string
}

// New returns the defaults of `tandem serve`.
func New() *Setup {
	s := &Setup{Config: serve.DefaultConfig()}
	s.Router.Mode = s.Config.RouterMode
	return s
}

// Start builds the engines and starts the system; it returns the system
// and the model's name. Resolving an SGLang server's ranks is bounded by
// upstream.Fleet.ResolveTargets.
func (s *Setup) Start(log *slog.Logger) (*serve.System, string, error) {
	s.Engine.Workers = int(s.Resources()["workers"])
	model, factory, err := s.Engine.Build(log)
	if err != nil {
		return nil, "", err
	}
	if s.Engine.Kind == "upstream" {
		if err := s.Engine.Up.ResolveTargets(context.Background(), log); err != nil {
			return nil, "", err
		}
		s.Config.Workers, s.Config.PDPrefillWorkers = s.Engine.Up.Workers(), len(s.Engine.Up.Prefill)
	} else if len(s.Engine.Up.Prefill) > 0 {
		return nil, "", errors.New("--upstream-prefill needs --engine upstream")
	}
	if err := s.Router.Resolve(); err != nil {
		return nil, "", err
	}
	s.Config.RouterMode, s.Config.KV = s.Router.Mode, s.Router.KV
	if err := s.Config.Frontend.LoadKeyFile(s.KeyFile); err != nil {
		return nil, "", err
	}
	sys, err := serve.Start(s.Config, model, factory, log)
	if err != nil {
		return nil, "", err
	}
	return sys, model.Name, nil
}

// Resources is what the started system uses: its workers (prefill and
// decode together) and, for the mocker, each worker's KV capacity. An
// experiment compares equal resources unless its variable is one.
func (s *Setup) Resources() map[string]float64 {
	w := s.Config.Workers
	if d := s.Config.Disagg; d.PrefillWorkers > 0 {
		dec := d.DecodeWorkers
		if dec == 0 {
			dec = s.Config.Workers
		}
		w = d.PrefillWorkers + dec
	}
	if s.Engine.Kind == "upstream" {
		w = len(s.Engine.Up.URLs) + len(s.Engine.Up.Prefill)
	}
	out := map[string]float64{"workers": float64(w)}
	if s.Engine.Kind == "mocker" {
		out["kv_capacity_tokens"] = float64(s.Engine.Mock.KVCapacityTokens)
	}
	return out
}

// Serve starts s and returns its URL and the function that shuts it down
// (bounded by 10 s).
func Serve(ctx context.Context, log *slog.Logger, s *Setup) (url string, stop func(), err error) {
	sys, _, err := s.Start(log)
	if err != nil {
		return "", nil, err
	}
	return sys.URL(), shutdown(ctx, sys), nil
}

// ModeStarter starts the servers of `bench prefix-reuse --start-server`
// (a bench.ServerStarter): the whole system in process on a free port,
// the mocker calibrated to the seed's Qwen3-0.6B worker, KV events on
// (the kv mode needs them), so a started server is exactly `tandem serve
// --timing qwen3-0.6b --kv-capacity-tokens N --router-mode MODE`.
func ModeStarter(log *slog.Logger, workers, capacity int, speedup float64) func(ctx context.Context, mode string) (string, func(), error) {
	return func(ctx context.Context, mode string) (string, func(), error) {
		eng := engines.Config{Kind: "mocker", Mock: mocker.DefaultConfig(), Timing: "qwen3-0.6b", KVEvents: "on", KVFormat: "map"}
		eng.Mock.KVEvents.Endpoint = "tcp://127.0.0.1:0"
		eng.Mock.KVCapacityTokens = capacity
		eng.Mock.Speedup = speedup
		model, factory, err := eng.Build(log)
		if err != nil {
			return "", nil, err
		}
		cfg := serve.DefaultConfig()
		cfg.HTTPAddr, cfg.Workers, cfg.RouterMode = "127.0.0.1:0", workers, mode
		sys, err := serve.Start(cfg, model, factory, log)
		if err != nil {
			return "", nil, err
		}
		return sys.URL(), shutdown(ctx, sys), nil
	}
}

func shutdown(ctx context.Context, sys *serve.System) func() {
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = sys.Shutdown(sctx)
	}
}
