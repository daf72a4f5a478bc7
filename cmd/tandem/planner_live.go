package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/discovery"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/httpapi"
	"github.com/tandemllm/tandem/planner"
	"github.com/tandemllm/tandem/planner/kube"
	"github.com/tandemllm/tandem/planner/local"
	"github.com/tandemllm/tandem/planner/sim"
	"github.com/tandemllm/tandem/serve"
)

// plannerFlags are the flags of the live planner shared by `tandem
// planner` and `tandem serve --autoscale`: the targets, the model, the
// stability rules and the planner's own listener.
type plannerFlags struct {
	pools                    []string
	profile, policy, predict string
	ttft, itl, q             float64
	interval, startup        time.Duration
	upCool, downCool         time.Duration
	window                   int
	alpha, beta              float64
	listen, keyFile          string
	dryRun                   bool
	// profileSource is serve's learned profile (--learn-profile), asked
	// every interval; nil without one.
	profileSource func() *planner.Profile
}

func (p *plannerFlags) register(cmd *cobra.Command, defaultPools []string) {
	f := cmd.Flags()
	f.StringArrayVar(&p.pools, "pool", defaultPools, "a pool to size: NAME=ROLE:MIN:MAX, ROLE aggregated, prefill or decode (repeat per pool)")
	f.StringVar(&p.profile, "profile", "", "planner profile JSON from `tandem bench profile` (empty: derived from the mocker's qwen3-0.6b timing)")
	f.StringVar(&p.policy, "policy", "tandem", "sizing policy: tandem, or dynamo (Dynamo SLA planner's throughput formulas)")
	f.StringVar(&p.predict, "predictor", "holt", "load predictor: constant, moving-average or holt")
	f.IntVar(&p.window, "predictor-window", 3, "moving-average: intervals averaged")
	f.Float64Var(&p.alpha, "holt-alpha", 0.5, "holt: level smoothing")
	f.Float64Var(&p.beta, "holt-beta", 0.3, "holt: trend smoothing")
	f.Float64Var(&p.ttft, "ttft-target", 500, "TTFT target, ms")
	f.Float64Var(&p.itl, "itl-target", 25, "ITL target, ms")
	f.Float64Var(&p.q, "quantile", 0.9, "the targets' quantile (0.9 = p90, 0.99 = p99)")
	f.DurationVar(&p.interval, "interval", 10*time.Second, "how often the planner observes and decides")
	f.DurationVar(&p.startup, "startup", 10*time.Second, "how long a new worker takes to serve (the planner plans that far ahead)")
	f.DurationVar(&p.upCool, "up-cooldown", 0, "least time after a pool's change before it grows again")
	f.DurationVar(&p.downCool, "down-cooldown", 30*time.Second, "least time after a pool's change before it shrinks")
	f.StringVar(&p.listen, "planner-listen", "127.0.0.1:9402", "the planner's /health and /metrics (a non-loopback address needs --planner-api-key-file; empty: none)")
	f.StringVar(&p.keyFile, "planner-api-key-file", "", "file of keys, one a line: the planner's /health and /metrics need \"Authorization: Bearer <key>\"")
	f.BoolVar(&p.dryRun, "dry-run", false, "print what the planner would do and scale nothing")
}

// parsePool reads NAME=ROLE:MIN:MAX.
func parsePool(s string) (planner.Pool, error) {
	name, rest, ok := strings.Cut(s, "=")
	parts := strings.Split(rest, ":")
	if !ok || name == "" || len(parts) != 3 {
		return planner.Pool{}, fmt.Errorf("--pool %q: want NAME=ROLE:MIN:MAX", s)
	}
	role, err := planner.ParseRole(parts[0])
	if err != nil {
		return planner.Pool{}, fmt.Errorf("--pool %q: %w", s, err)
	}
	lo, err1 := strconv.Atoi(parts[1])
	hi, err2 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil || lo < 0 || hi < lo || hi > 1<<16 {
		return planner.Pool{}, fmt.Errorf("--pool %q: want integers 0 ≤ MIN ≤ MAX ≤ 65536", s)
	}
	return planner.Pool{Name: name, Role: role, Min: lo, Max: hi}, nil
}

// build makes the planner from the flags.
func (p *plannerFlags) build(log *slog.Logger, board *health.Board, reg prometheus.Registerer) (*planner.Planner, error) {
	var pools []planner.Pool
	for _, s := range p.pools {
		pl, err := parsePool(s)
		if err != nil {
			return nil, err
		}
		pools = append(pools, pl)
	}
	pol, err := planner.NewPolicy(p.policy)
	if err != nil {
		return nil, err
	}
	if _, err := planner.NewPredictor(p.predict, p.window, p.alpha, p.beta); err != nil {
		return nil, err
	}
	prof := sim.WorkerSpec{}.Profile()
	if p.profile != "" {
		if prof, err = planner.LoadProfile(p.profile); err != nil {
			return nil, err
		}
	}
	return planner.New(planner.Config{
		Pools: pools, Policy: pol, Profile: prof, ProfileSource: p.profileSource,
		Targets: planner.Targets{TTFTMs: p.ttft, ITLMs: p.itl, Quantile: p.q},
		NewPredictor: func() planner.Predictor {
			pr, _ := planner.NewPredictor(p.predict, p.window, p.alpha, p.beta)
			return pr
		},
		Interval: p.interval, Startup: p.startup, UpCooldown: p.upCool, DownCooldown: p.downCool,
		Logger: log, Board: board, Registerer: reg,
	})
}

// run drives the loop until ctx ends, with the planner's listener. reg
// and board are where its metrics and diagnostics go (nil: its own, which
// only its listener shows).
func (p *plannerFlags) run(ctx context.Context, log *slog.Logger, obs planner.Observer, act planner.Actuator, out io.Writer,
	reg *prometheus.Registry, board *health.Board) error {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if board == nil {
		board = health.NewBoard(log, reg)
	}
	pl, err := p.build(log, board, reg)
	if err != nil {
		return err
	}
	if p.dryRun {
		act = &planner.DryRun{Actuator: act, Out: out}
	}
	loop := &planner.Loop{Planner: pl, Observer: obs, Actuator: act, Board: board}
	if p.listen != "" {
		var keys planner.KeyChecker
		if p.keyFile != "" {
			k, err := httpapi.LoadAPIKeys(p.keyFile)
			if err != nil {
				return err
			}
			keys = k
		}
		if err := planner.CheckListen(p.listen, keys != nil); err != nil {
			return err
		}
		lis, err := net.Listen("tcp", p.listen)
		if err != nil {
			return fmt.Errorf("planner: listen %s: %w", p.listen, err)
		}
		srv := &http.Server{Handler: loop.Handler(reg, keys), ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
		go func() { _ = srv.Serve(lis) }()
		defer srv.Close()
		fmt.Fprintf(out, "planner: /health and /metrics on http://%s\n", lis.Addr())
	}
	fmt.Fprintf(out, "planner: policy %s, every %v, targets TTFT %v ms ITL %v ms at p%v%s\n", p.policy, p.interval, p.ttft, p.itl,
		p.q*100, map[bool]string{true: " (dry run: nothing is scaled)"}[p.dryRun])
	if f, ok := out.(*os.File); ok {
		_ = f.Sync()
	}
	return loop.Run(ctx)
}

// metricsClient is the HTTP client of the scrapes: a bounded time, and
// the CA of https endpoints.
func metricsClient(caFile string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--metrics-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--metrics-ca %s: no PEM certificate", caFile)
		}
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	}
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}, nil
}

// readKey reads a one-line secret file.
func readKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if len(b) > 4096 {
		return "", fmt.Errorf("%s: longer than a key (4096 bytes)", path)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return l, nil
		}
	}
	return "", fmt.Errorf("%s: no key", path)
}

func newPlannerRunFlags(c *cobra.Command) func(cmd *cobra.Command) error {
	var (
		pf                                  plannerFlags
		frontend, modelName, keyFile, caURL string
		workers                             []string
		actuator, kubeconfig, ns, name      string
		deployments, localWorkers           []string
		stopTimeout                         time.Duration
	)
	pf.register(c, []string{"agg=aggregated:1:8"})
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
		client, err := metricsClient(caURL)
		if err != nil {
			return err
		}
		sc := &planner.Scraper{URL: frontend, Workers: workers, Model: modelName, Client: client}
		if keyFile != "" {
			k, err := readKey(keyFile)
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
				if pf.dryRun {
					return
				}
				_ = sup.Close(ctx)
			}()
			act = sup
		default:
			return fmt.Errorf("planner: unknown --actuator %q (tandemdeployment, deployment, local)", actuator)
		}
		return pf.run(cmd.Context(), log, sc, act, cmd.OutOrStdout(), nil, nil)
	}
}

// autoscaleFlags are `tandem serve --autoscale`: the planner in the serve
// process, reading its frontend's registry and resizing its in-process
// pool (serve.ScalePool: removal drains).
type autoscaleFlags struct {
	on bool
	pf plannerFlags
}

func (a *autoscaleFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&a.on, "autoscale", false, "run the planner in this process: it resizes the workers to meet --ttft-target and --itl-target (pool \"agg\", sized within --pool agg=aggregated:MIN:MAX; MIN 0 scales to zero and keeps the model advertised)")
	a.pf.register(cmd, []string{"agg=aggregated:1:8"})
}

// start runs the planner until ctx ends; its errors are logged. The
// returned wait stops it and blocks until it has stopped (before the system shuts
// down, so no scaling runs into the shutdown).
func (a *autoscaleFlags) start(ctx context.Context, sys *serve.System, log *slog.Logger, out io.Writer) (wait func(), err error) {
	if !a.on {
		return func() {}, nil
	}
	if len(a.pf.pools) != 1 || !strings.HasPrefix(a.pf.pools[0], "agg=") {
		return nil, errors.New("serve --autoscale: give one --pool, agg=aggregated:MIN:MAX")
	}
	if _, err := a.pf.build(log, nil, nil); err != nil { // fail at start, not in the goroutine
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
		if err := a.pf.run(ctx, log, obs, act, out, sys.Registry, sys.Board); err != nil {
			log.Error("planner stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}
