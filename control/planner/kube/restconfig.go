package kube

import (
	"errors"
	"fmt"

	"github.com/tandemllm/tandem/internal/kubeapi"
)

// RESTConfig is the API server config of a --kubeconfig file, else of
// the pod's service account. Outside a pod the error names the flag to
// pass (and otherwise, another way to run) instead of client-go's bare
// "unable to load in-cluster configuration". who names the caller in
// errors (e.g. "planner --actuator deployment"); otherwise is appended to
// the not-in-a-pod error (", or ..." naming another way to run).
func RESTConfig(who, kubeconfig, otherwise string) (*kubeapi.Config, error) {
	if kubeconfig != "" {
		rc, err := kubeapi.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("%s: --kubeconfig %s: %w", who, kubeconfig, err)
		}
		return rc, nil
	}
	rc, err := kubeapi.InClusterConfig()
	if errors.Is(err, kubeapi.ErrNotInCluster) {
		return nil, fmt.Errorf("%s: not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST is unset), so there is no service account to reach the API server with: pass --kubeconfig FILE (e.g. ~/.kube/config)%s", who, otherwise)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: API server config from the pod's service account: %w", who, err)
	}
	return rc, nil
}
