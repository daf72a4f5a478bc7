// Package kube is the planner's Kubernetes actuator: it sizes the pools of
// a TandemDeployment (a JSON patch of /spec/pools/<i>/replicas, guarded by
// a test of the pool's name so a reordered list is never mis-scaled) or
// plain Deployments through their scale subresource. Removal drains
// because the workers do: Kubernetes sends SIGTERM, and a `tandem worker`
// deregisters, finishes its streams and exits within its grace period.
package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	"k8s.io/client-go/rest"

	"github.com/tandemllm/tandem/api/v1alpha1"
)

// TandemDeployment scales the pools of one TandemDeployment object; pool
// names are the object's pool names.
type TandemDeployment struct {
	Client    dynamic.Interface
	Namespace string
	Name      string
}

// NewTandemDeployment builds the actuator from a REST config.
func NewTandemDeployment(cfg *rest.Config, namespace, name string) (*TandemDeployment, error) {
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("planner/kube: %w", err)
	}
	return &TandemDeployment{Client: c, Namespace: namespace, Name: name}, nil
}

func (t *TandemDeployment) res() dynamic.ResourceInterface {
	return t.Client.Resource(v1alpha1.GroupVersion.WithResource("tandemdeployments")).Namespace(t.Namespace)
}

func (t *TandemDeployment) pools(ctx context.Context) ([]v1alpha1.PoolSpec, error) {
	u, err := t.res().Get(ctx, t.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("planner/kube: get tandemdeployment %s/%s: %w", t.Namespace, t.Name, err)
	}
	b, err := json.Marshal(u.Object["spec"])
	if err != nil {
		return nil, fmt.Errorf("planner/kube: %w", err)
	}
	var spec struct {
		Pools []v1alpha1.PoolSpec `json:"pools"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("planner/kube: tandemdeployment %s/%s spec: %w", t.Namespace, t.Name, err)
	}
	return spec.Pools, nil
}

// Replicas implements planner.Actuator.
func (t *TandemDeployment) Replicas(ctx context.Context) (map[string]int, error) {
	ps, err := t.pools(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, p := range ps {
		out[p.Name] = int(p.Replicas)
	}
	return out, nil
}

// Scale implements planner.Actuator.
func (t *TandemDeployment) Scale(ctx context.Context, pool string, n int) error {
	if n < 0 || n > 10000 {
		return fmt.Errorf("planner/kube: pool %s: %d replicas out of the CRD's 0..10000", pool, n)
	}
	ps, err := t.pools(ctx)
	if err != nil {
		return err
	}
	i := -1
	for k, p := range ps {
		if p.Name == pool {
			i = k
		}
	}
	if i < 0 {
		return fmt.Errorf("planner/kube: tandemdeployment %s/%s has no pool %q", t.Namespace, t.Name, pool)
	}
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": fmt.Sprintf("/spec/pools/%d/name", i), "value": pool},
		{"op": "replace", "path": fmt.Sprintf("/spec/pools/%d/replicas", i), "value": n},
	})
	if _, err := t.res().Patch(ctx, t.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "tandem-planner"}); err != nil {
		return fmt.Errorf("planner/kube: patch tandemdeployment %s/%s pool %s: %w", t.Namespace, t.Name, pool, err)
	}
	return nil
}

// Deployments scales plain Deployments through their scale subresource,
// for fleets not run by the operator: pool name → Deployment name.
type Deployments struct {
	// Client is the apps/v1 typed client only, not the whole clientset:
	// only what the planner uses is linked into tandem.
	Client    appsv1client.AppsV1Interface
	Namespace string
	Pools     map[string]string
}

// NewDeployments builds the actuator from a REST config.
func NewDeployments(cfg *rest.Config, namespace string, pools map[string]string) (*Deployments, error) {
	if len(pools) == 0 {
		return nil, errors.New("planner/kube: no deployments")
	}
	c, err := appsv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("planner/kube: %w", err)
	}
	return &Deployments{Client: c, Namespace: namespace, Pools: pools}, nil
}

// Replicas implements planner.Actuator.
func (d *Deployments) Replicas(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	for pool, name := range d.Pools {
		s, err := d.Client.Deployments(d.Namespace).GetScale(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("planner/kube: get scale of deployment %s/%s: %w", d.Namespace, name, err)
		}
		out[pool] = int(s.Spec.Replicas)
	}
	return out, nil
}

// Scale implements planner.Actuator.
func (d *Deployments) Scale(ctx context.Context, pool string, n int) error {
	name, ok := d.Pools[pool]
	if !ok {
		return fmt.Errorf("planner/kube: no deployment for pool %q", pool)
	}
	if n < 0 || n > 1<<20 {
		return fmt.Errorf("planner/kube: pool %s: %d replicas out of range", pool, n)
	}
	s := &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: d.Namespace},
		Spec:       autoscalingv1.ScaleSpec{Replicas: int32(n)},
	}
	if _, err := d.Client.Deployments(d.Namespace).UpdateScale(ctx, name, s, metav1.UpdateOptions{FieldManager: "tandem-planner"}); err != nil {
		return fmt.Errorf("planner/kube: scale deployment %s/%s to %d: %w", d.Namespace, name, n, err)
	}
	return nil
}
