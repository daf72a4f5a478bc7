package main

import (
	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/operator"
)

func newOperatorCmd() *cobra.Command {
	var o operator.Options
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Reconcile TandemDeployment objects into frontends, worker pools and their RBAC",
		Long: `Runs the TandemDeployment operator (controller-runtime). Install the CRD
first (deploy/crd or the Helm chart in deploy/helm/tandem-operator); see
docs/kubernetes.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd)
			if err != nil {
				return err
			}
			rc, err := kubeRESTConfig("operator", kubeconfig, " (the operator runs in the cluster it manages: deploy/helm/tandem-operator)")
			if err != nil {
				return err
			}
			o.Config, o.Logger = rc, log
			return operator.Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: the pod's service account; $KUBECONFIG is not read, so an operator never runs against the wrong cluster by accident)")
	f.StringVar(&o.Namespace, "namespace", "", "reconcile only this namespace (default: all)")
	f.StringVar(&o.MetricsAddr, "metrics-addr", "0", "controller metrics (Prometheus) listen address; 0: off")
	f.StringVar(&o.ProbeAddr, "probe-addr", ":8081", "/healthz and /readyz listen address; 0: off")
	f.BoolVar(&o.LeaderElect, "leader-elect", false, "run one active replica, elected through a Lease")
	f.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader-election Lease (default: the pod's)")
	return cmd
}
