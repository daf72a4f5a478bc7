// Package live runs the planner against a live deployment: its flags
// (shared by `tandem planner` and `tandem serve --autoscale`), the
// planner they describe, and the loop with its /health and /metrics
// listener. The actuators and the observer are the caller's.
package live

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
	"github.com/spf13/pflag"

	"github.com/tandemllm/tandem/control/planner"
	"github.com/tandemllm/tandem/control/planner/sim"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/httpapi"
)

// Config is the live planner's flags shared by `tandem
// planner` and `tandem serve --autoscale`: the targets, the model, the
// stability rules and the planner's own listener.
type Config struct {
	// Pools are --pool values, NAME=ROLE:MIN:MAX (ParsePool).
	Pools []string
	// Profile is --profile (empty: derived from the mocker's qwen3-0.6b
	// timing); Policy --policy; Predictor --predictor.
	Profile, Policy, Predictor string
	// TTFT, ITL (ms) and Quantile are the targets.
	TTFT, ITL, Quantile float64
	// Interval, Startup, UpCooldown and DownCooldown are planner.Config's.
	Interval, Startup        time.Duration
	UpCooldown, DownCooldown time.Duration
	// Window, Alpha and Beta configure the predictor.
	Window      int
	Alpha, Beta float64
	// Listen is the planner's /health and /metrics address (empty: none);
	// KeyFile the keys they need.
	Listen, KeyFile string
	// DryRun prints the decisions and scales nothing.
	DryRun bool
	// ProfileSource is serve's learned profile (--learn-profile), asked
	// every interval; nil without one.
	ProfileSource func() *planner.Profile
}

// AddFlags registers the planner's flags; --pool defaults to defaultPools.
func (p *Config) AddFlags(f *pflag.FlagSet, defaultPools []string) {
	f.StringArrayVar(&p.Pools, "pool", defaultPools, "a pool to size: NAME=ROLE:MIN:MAX, ROLE aggregated, prefill or decode (repeat per pool)")
	f.StringVar(&p.Profile, "profile", "", "planner profile JSON from `tandem bench profile` (empty: derived from the mocker's qwen3-0.6b timing)")
	f.StringVar(&p.Policy, "policy", "tandem", "sizing policy: tandem, or dynamo (Dynamo SLA planner's throughput formulas)")
	f.StringVar(&p.Predictor, "predictor", "holt", "load predictor: constant, moving-average or holt")
	f.IntVar(&p.Window, "predictor-window", 3, "moving-average: intervals averaged")
	f.Float64Var(&p.Alpha, "holt-alpha", 0.5, "holt: level smoothing")
	f.Float64Var(&p.Beta, "holt-beta", 0.3, "holt: trend smoothing")
	f.Float64Var(&p.TTFT, "ttft-target", 500, "TTFT target, ms")
	f.Float64Var(&p.ITL, "itl-target", 25, "ITL target, ms")
	f.Float64Var(&p.Quantile, "quantile", 0.9, "the targets' quantile (0.9 = p90, 0.99 = p99)")
	f.DurationVar(&p.Interval, "interval", 10*time.Second, "how often the planner observes and decides")
	f.DurationVar(&p.Startup, "startup", 10*time.Second, "how long a new worker takes to serve (the planner plans that far ahead)")
	f.DurationVar(&p.UpCooldown, "up-cooldown", 0, "least time after a pool's change before it grows again")
	f.DurationVar(&p.DownCooldown, "down-cooldown", 30*time.Second, "least time after a pool's change before it shrinks")
	f.StringVar(&p.Listen, "planner-listen", "127.0.0.1:9402", "the planner's /health and /metrics (a non-loopback address needs --planner-api-key-file; empty: none)")
	f.StringVar(&p.KeyFile, "planner-api-key-file", "", "file of keys, one a line: the planner's /health and /metrics need \"Authorization: Bearer <key>\"")
	f.BoolVar(&p.DryRun, "dry-run", false, "print what the planner would do and scale nothing")
}

// ParsePool reads NAME=ROLE:MIN:MAX.
func ParsePool(s string) (planner.Pool, error) {
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

// Build makes the planner from the flags.
func (p *Config) Build(log *slog.Logger, board *health.Board, reg prometheus.Registerer) (*planner.Planner, error) {
	var pools []planner.Pool
	for _, s := range p.Pools {
		pl, err := ParsePool(s)
		if err != nil {
			return nil, err
		}
		pools = append(pools, pl)
	}
	pol, err := planner.NewPolicy(p.Policy)
	if err != nil {
		return nil, err
	}
	if _, err := planner.NewPredictor(p.Predictor, p.Window, p.Alpha, p.Beta); err != nil {
		return nil, err
	}
	prof := sim.WorkerSpec{}.Profile()
	if p.Profile != "" {
		if prof, err = planner.LoadProfile(p.Profile); err != nil {
			return nil, err
		}
	}
	return planner.New(planner.Config{
		Pools: pools, Policy: pol, Profile: prof, ProfileSource: p.ProfileSource,
		Targets: planner.Targets{TTFTMs: p.TTFT, ITLMs: p.ITL, Quantile: p.Quantile},
		NewPredictor: func() planner.Predictor {
			pr, _ := planner.NewPredictor(p.Predictor, p.Window, p.Alpha, p.Beta)
			return pr
		},
		Interval: p.Interval, Startup: p.Startup, UpCooldown: p.UpCooldown, DownCooldown: p.DownCooldown,
		Logger: log, Board: board, Registerer: reg,
	})
}

// Run drives the loop until ctx ends, with the planner's listener. reg
// and board are where its metrics and diagnostics go (nil: its own, which
// only its listener shows).
func (p *Config) Run(ctx context.Context, log *slog.Logger, obs planner.Observer, act planner.Actuator, out io.Writer,
	reg *prometheus.Registry, board *health.Board) error {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if board == nil {
		board = health.NewBoard(log, reg)
	}
	pl, err := p.Build(log, board, reg)
	if err != nil {
		return err
	}
	if p.DryRun {
		act = &planner.DryRun{Actuator: act, Out: out}
	}
	loop := &planner.Loop{Planner: pl, Observer: obs, Actuator: act, Board: board}
	if p.Listen != "" {
		var keys planner.KeyChecker
		if p.KeyFile != "" {
			k, err := httpapi.LoadAPIKeys(p.KeyFile)
			if err != nil {
				return err
			}
			keys = k
		}
		if err := planner.CheckListen(p.Listen, keys != nil); err != nil {
			return err
		}
		lis, err := net.Listen("tcp", p.Listen)
		if err != nil {
			return fmt.Errorf("planner: listen %s: %w", p.Listen, err)
		}
		srv := &http.Server{Handler: loop.Handler(reg, keys), ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
		go func() { _ = srv.Serve(lis) }()
		defer srv.Close()
		fmt.Fprintf(out, "planner: /health and /metrics on http://%s\n", lis.Addr())
	}
	fmt.Fprintf(out, "planner: policy %s, every %v, targets TTFT %v ms ITL %v ms at p%v%s\n", p.Policy, p.Interval, p.TTFT, p.ITL,
		p.Quantile*100, map[bool]string{true: " (dry run: nothing is scaled)"}[p.DryRun])
	if f, ok := out.(*os.File); ok {
		_ = f.Sync()
	}
	return loop.Run(ctx)
}

// MetricsClient is the HTTP client of the scrapes: a bounded time, and
// the CA of https endpoints.
func MetricsClient(caFile string) (*http.Client, error) {
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

// ReadKey reads a one-line secret file.
func ReadKey(path string) (string, error) {
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
