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
	"time"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/control/planner"
	"github.com/tandemllm/tandem/control/planner/kube"
	"github.com/tandemllm/tandem/control/planner/live"
	"github.com/tandemllm/tandem/control/planner/local"
	"github.com/tandemllm/tandem/nodes/serve"
)

func newPlannerRunFlags(c *cobra.Command) func(cmd *cobra.Command) error {
	var (
		pf                                  live.Config
		frontend, modelName, keyFile, caURL string
		workers                             []string
		actuator, kubeconfig, ns, name      string
		deployments, localWorkers           []string
		stopTimeout                         time.Duration
	)
	pf.AddFlags(c.Flags(), []string{"agg=aggregated:1:8"})
	f := c.Flags()
	f.StringVar(&frontend, "frontend-metrics", "", "the frontend's /metrics URL (required)")
	f.StringArrayVar(&workers, "worker-metrics", nil, "a worker's /metrics URL (repeat; optional: running/waiting requests and KV usage shown on /health)")
	f.StringVar(&modelName, "model", "", "only this model's series (empty: all)")
	f.StringVar(&keyFile, "metrics-key-file", "", "file holding the bearer key for a frontend run with --protect-metrics")
	f.StringVar(&caURL, "metrics-ca", "", "PEM CA that https metrics endpoints chain to")
	f.StringVar(&actuator, "actuator", "tandemdeployment", "how pools are scaled: tandemdeployment (patch a TandemDeployment's pool replicas), deployment (Deployments' scale subresource), local (start and stop `tandem worker` processes here)")
	discovery.AddKubeconfigFlag(f, &kubeconfig)
	f.StringVar(&ns, "namespace", "default", "the namespace of the TandemDeployment or Deployments")
	f.StringVar(&name, "name", "", "--actuator tandemdeployment: the TandemDeployment's name")
	f.StringArrayVar(&deployments, "deployment", nil, "--actuator deployment: POOL=DEPLOYMENT (repeat)")
	f.StringArrayVar(&localWorkers, "local-worker", nil, "--actuator local: POOL=ARGS, the `tandem` arguments of one worker ({n}: its number, {id}: its id), e.g. 'agg=worker --engine mocker --id {id} --discovery ...' (repeat per pool)")
	f.DurationVar(&stopTimeout, "local-stop-timeout", 2*time.Minute, "--actuator local: how long a SIGTERMed worker may drain before it is killed")
	return func(cmd *cobra.Command) error {
		if frontend == "" {
			return errors.New("planner: --frontend-metrics is required (or use `tandem planner simulate`)")
		}
		log, err := newLogger(cmd)
		if err != nil {
			return err
		}
		client, err := live.MetricsClient(caURL)
		if err != nil {
			return err
		}
		sc := &planner.Scraper{URL: frontend, Workers: workers, Model: modelName, Client: client}
		if keyFile != "" {
			k, err := live.ReadKey(keyFile)
			if err != nil {
				return fmt.Errorf("--metrics-key-file: %w", err)
			}
			sc.Header = http.Header{"Authorization": {"Bearer " + k}}
		}
		var act planner.Actuator
		switch actuator {
		case "tandemdeployment", "deployment":
			rc, err := kube.RESTConfig("planner --actuator "+actuator, kubeconfig,
				", or --actuator local --local-worker POOL=ARGS to scale `tandem worker` processes on this machine")
			if err != nil {
				return err
			}
			if actuator == "tandemdeployment" {
				if name == "" {
					return errors.New("planner: --actuator tandemdeployment needs --name")
				}
				if act, err = kube.NewTandemDeployment(rc, ns, name); err != nil {
					return err
				}
			} else {
				m := map[string]string{}
				for _, d := range deployments {
					p, dn, ok := strings.Cut(d, "=")
					if !ok || p == "" || dn == "" {
						return fmt.Errorf("--deployment %q: want POOL=DEPLOYMENT", d)
					}
					m[p] = dn
				}
				if act, err = kube.NewDeployments(rc, ns, m); err != nil {
					return err
				}
			}
		case "local":
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			sup := &local.Supervisor{Binary: bin, Pools: map[string]local.Pool{}, StopTimeout: stopTimeout, Output: os.Stderr, Logger: log}
			for _, lw := range localWorkers {
				p, args, ok := strings.Cut(lw, "=")
				if !ok || p == "" || strings.TrimSpace(args) == "" {
					return fmt.Errorf("--local-worker %q: want POOL=ARGS", lw)
				}
				sup.Pools[p] = local.Pool{Args: strings.Fields(args)}
			}
			if len(sup.Pools) == 0 {
				return errors.New("planner: --actuator local needs --local-worker")
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), stopTimeout+10*time.Second)
				defer cancel()
				if pf.DryRun {
					return
				}
				_ = sup.Close(ctx)
			}()
			act = sup
		default:
			return fmt.Errorf("planner: unknown --actuator %q (tandemdeployment, deployment, local)", actuator)
		}
		return pf.Run(cmd.Context(), log, sc, act, cmd.OutOrStdout(), nil, nil)
	}
}

// autoscaleFlags are `tandem serve --autoscale`: the planner in the serve
// process, reading its frontend's registry and resizing its in-process
// pool (serve.ScalePool: removal drains).
type autoscaleFlags struct {
	on bool
	pf live.Config
}

func (a *autoscaleFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&a.on, "autoscale", false, "run the planner in this process: it resizes the workers to meet --ttft-target and --itl-target (pool \"agg\", sized within --pool agg=aggregated:MIN:MAX; MIN 0 scales to zero and keeps the model advertised)")
	a.pf.AddFlags(cmd.Flags(), []string{"agg=aggregated:1:8"})
}

// start runs the planner until ctx ends; its errors are logged. The
// returned wait stops it and blocks until it has stopped (before the system shuts
// down, so no scaling runs into the shutdown).
func (a *autoscaleFlags) start(ctx context.Context, sys *serve.System, log *slog.Logger, out io.Writer) (wait func(), err error) {
	if !a.on {
		return func() {}, nil
	}
	if len(a.pf.Pools) != 1 || !strings.HasPrefix(a.pf.Pools[0], "agg=") {
		return nil, errors.New("serve --autoscale: give one --pool, agg=aggregated:MIN:MAX")
	}
	if _, err := a.pf.Build(log, nil, nil); err != nil { // fail at start, not in the goroutine
		return nil, err
	}
	// A no-op resize says whether this shape can be resized at all.
	if err := sys.ScalePool(ctx, sys.PoolSize()); err != nil {
		return nil, fmt.Errorf("serve --autoscale: %w", err)
	}
	obs := &planner.Scraper{Gatherer: sys.Registry}
	act := serve.PoolActuator{System: sys, Pool: "agg"}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The serve process's registry and board: tandem_planner_* on its
		// /metrics, the planner's diagnostics on its /health.
		if err := a.pf.Run(ctx, log, obs, act, out, sys.Registry, sys.Board); err != nil {
			log.Error("planner stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}
