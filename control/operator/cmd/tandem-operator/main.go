// Command tandem-operator runs the TandemDeployment operator
// (controller-runtime). It is a binary of its own, as Dynamo's and llm-d's
// operators are, so that controller-runtime and the Kubernetes clients it
// needs are linked into it alone and not into every `tandem` process; and
// in a Go module of its own (control/operator/go.mod), so that the main
// module's build and tests compile none of them either.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tandemllm/tandem/control/operator"
)

// version and commit are stamped at link time (-X main.version=...), as
// the tandem binary's are.
var version, commit = "unknown", "unknown"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "tandem-operator:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	var o operator.Options
	var kubeconfig, level string
	cmd := &cobra.Command{
		Use:   "tandem-operator",
		Short: "Reconcile TandemDeployment objects into frontends, worker pools and their RBAC",
		Long: `Runs the TandemDeployment operator (controller-runtime). Install the CRD
first (deploy/crd or the Helm chart in deploy/helm/tandem-operator); see
docs/kubernetes.md.`,
		Example: `  tandem-operator --leader-elect --probe-addr :8081        # in the cluster (deploy/helm/tandem-operator)
  tandem-operator --kubeconfig ~/.kube/config --namespace demo  # from outside, against one namespace`,
		Version:       version + " (commit " + commit + ")",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var l slog.Level
			if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			rc, err := restConfig(kubeconfig)
			if err != nil {
				return err
			}
			o.Config, o.Logger = rc, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
			return operator.Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&level, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: the pod's service account; $KUBECONFIG is not read, so an operator never runs against the wrong cluster by accident)")
	f.StringVar(&o.Namespace, "namespace", "", "reconcile only this namespace (default: all)")
	f.StringVar(&o.MetricsAddr, "metrics-addr", "0", "controller metrics (Prometheus) listen address; 0: off")
	f.StringVar(&o.ProbeAddr, "probe-addr", ":8081", "/healthz and /readyz listen address; 0: off")
	f.BoolVar(&o.LeaderElect, "leader-elect", false, "run one active replica, elected through a Lease")
	f.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader-election Lease (default: the pod's)")
	return cmd
}

// restConfig is the API server config of --kubeconfig, else of the pod's
// service account; outside a pod the error names the flag to pass instead
// of client-go's bare "unable to load in-cluster configuration".
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}
		return rc, nil
	}
	rc, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, errors.New("not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST is unset), so there is no service account to reach the API server with: pass --kubeconfig FILE (e.g. ~/.kube/config); in the cluster, deploy/helm/tandem-operator runs it")
	}
	if err != nil {
		return nil, fmt.Errorf("API server config from the pod's service account: %w", err)
	}
	return rc, nil
}
