package operator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tandemllm/tandem/control/operator/api/v1alpha1"
	"github.com/tandemllm/tandem/health"
)

// Options configure the operator process.
type Options struct {
	Config *rest.Config
	// Namespace limits the operator to one namespace (empty: all).
	Namespace string
	// MetricsAddr serves controller-runtime's Prometheus metrics and the
	// operator's diagnostics gauge ("0": off). ProbeAddr serves /healthz,
	// /readyz and /health, the operator's diagnostics ("0": off).
	MetricsAddr, ProbeAddr string
	// Board receives the operator's diagnostics (default: a board on
	// controller-runtime's metrics registry).
	Board *health.Board
	// APIProbeEvery is how often the API server's reachability is
	// checked (default 10 s).
	APIProbeEvery time.Duration
	// LeaderElect runs one active replica (a Lease in
	// LeaderElectionNamespace).
	LeaderElect             bool
	LeaderElectionNamespace string
	Logger                  *slog.Logger
	// Reconciler overrides (tests, benchmarks): the frontend's /health
	// URL, the apply calls in flight per object.
	HealthURL     func(*v1alpha1.TandemDeployment) string
	ApplyParallel int
}

// Scheme holds the kinds the operator reads and writes, and nothing else:
// a smaller scheme is a smaller binary and a smaller cache.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, rbacv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("operator: scheme: %w", err)
		}
	}
	return s, nil
}

var (
	boardOnce sync.Once
	board     *health.Board
)

// processBoard is the process's one board on controller-runtime's metrics
// registry (served on MetricsAddr), where a metric may be registered once.
func processBoard(log *slog.Logger) *health.Board {
	boardOnce.Do(func() { board = health.NewBoard(log, crmetrics.Registry) })
	return board
}

// Run runs the operator until ctx ends.
func Run(ctx context.Context, o Options) error {
	sch, err := Scheme()
	if err != nil {
		return err
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	board := o.Board
	if board == nil {
		board = processBoard(log)
	}
	mo := ctrl.Options{
		Scheme:  sch,
		Metrics: metricsserver.Options{BindAddress: def(o.MetricsAddr, "0")},
		// The probe address is served below, with /health beside the
		// probes.
		HealthProbeBindAddress:  "0",
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        "tandem-operator.tandem.dev",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
	}
	if o.Namespace != "" {
		mo.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{o.Namespace: {}}}
	}
	mgr, err := ctrl.NewManager(o.Config, mo)
	if err != nil {
		return fmt.Errorf("operator: manager: %w", err)
	}
	r := &Reconciler{Client: mgr.GetClient(), Scheme: sch, HealthURL: o.HealthURL, ApplyParallel: o.ApplyParallel, Board: board}
	if o.Namespace != "" {
		// controller-runtime refuses two controllers of one name in a
		// process (their metrics would collide).
		r.Name = "tandemdeployment-" + o.Namespace
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("operator: controller: %w", err)
	}
	check, err := versionCheck(o.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	probeDone := make(<-chan error)
	if pa := def(o.ProbeAddr, "0"); pa != "0" {
		addr, done, err := serveProbes(ctx, pa, board, log)
		if err != nil {
			return err
		}
		probeDone = done
		log.Info("operator probes", "addr", addr.String())
	}
	every := o.APIProbeEvery
	if every <= 0 {
		every = 10 * time.Second
	}
	// Every replica probes, leader or not: a standby that cannot reach
	// the API server cannot take over either.
	go probeAPI(ctx, check, board, every, 5*time.Second)
	log.Info("operator starting", "namespace", o.Namespace, "leader_elect", o.LeaderElect)
	errc := make(chan error, 1)
	go func() { errc <- mgr.Start(ctx) }()
	select {
	case err := <-errc:
		return err
	case err := <-probeDone:
		cancel()
		<-errc
		if err != nil {
			return fmt.Errorf("operator: probe server: %w", err)
		}
		return nil
	}
}
