package operator

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tandemllm/tandem/api/v1alpha1"
)

// Options configure the operator process.
type Options struct {
	Config *rest.Config
	// Namespace limits the operator to one namespace (empty: all).
	Namespace string
	// MetricsAddr serves controller-runtime's Prometheus metrics ("0":
	// off). ProbeAddr serves /healthz and /readyz ("0": off).
	MetricsAddr, ProbeAddr string
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
	mo := ctrl.Options{
		Scheme:                  sch,
		Metrics:                 metricsserver.Options{BindAddress: def(o.MetricsAddr, "0")},
		HealthProbeBindAddress:  def(o.ProbeAddr, "0"),
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
	r := &Reconciler{Client: mgr.GetClient(), Scheme: sch, HealthURL: o.HealthURL, ApplyParallel: o.ApplyParallel}
	if o.Namespace != "" {
		// controller-runtime refuses two controllers of one name in a
		// process (their metrics would collide).
		r.Name = "tandemdeployment-" + o.Namespace
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("operator: controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("operator: healthz: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("operator: readyz: %w", err)
	}
	log.Info("operator starting", "namespace", o.Namespace, "leader_elect", o.LeaderElect)
	return mgr.Start(ctx)
}
