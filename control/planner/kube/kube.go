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
	"net/http"
	"net/url"

	"github.com/tandemllm/tandem/internal/kubeapi"
)

// fieldManager names the planner in the objects' managed fields.
var fieldManager = url.Values{"fieldManager": {"tandem-planner"}}

// TandemDeployment scales the pools of one TandemDeployment object; pool
// names are the object's pool names.
type TandemDeployment struct {
	Client    *kubeapi.Client
	Namespace string
	Name      string
}

// NewTandemDeployment builds the actuator from a connection config.
func NewTandemDeployment(cfg *kubeapi.Config, namespace, name string) (*TandemDeployment, error) {
	c, err := kubeapi.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("planner/kube: %w", err)
	}
	return &TandemDeployment{Client: c, Namespace: namespace, Name: name}, nil
}

// path is the object's URL path (group tandem.dev, version v1alpha1:
// control/operator/api/v1alpha1's GroupVersion).
func (t *TandemDeployment) path() string {
	return "/apis/tandem.dev/v1alpha1/namespaces/" + url.PathEscape(t.Namespace) + "/tandemdeployments/" + url.PathEscape(t.Name)
}

// poolSpec is the part of control/operator/api/v1alpha1's PoolSpec the planner reads.
type poolSpec struct {
	Name     string `json:"name"`
	Replicas int32  `json:"replicas"`
}

func (t *TandemDeployment) pools(ctx context.Context) ([]poolSpec, error) {
	var obj struct {
		Spec struct {
			Pools []poolSpec `json:"pools"`
		} `json:"spec"`
	}
	if err := t.Client.Do(ctx, kubeapi.Request{Method: http.MethodGet, Path: t.path()}, &obj); err != nil {
		return nil, fmt.Errorf("planner/kube: get tandemdeployment %s/%s: %w", t.Namespace, t.Name, err)
	}
	return obj.Spec.Pools, nil
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
	if err := t.Client.Do(ctx, kubeapi.Request{Method: http.MethodPatch, Path: t.path(), Query: fieldManager,
		Body: patch, ContentType: kubeapi.JSONPatch}, nil); err != nil {
		return fmt.Errorf("planner/kube: patch tandemdeployment %s/%s pool %s: %w", t.Namespace, t.Name, pool, err)
	}
	return nil
}

// Deployments scales plain Deployments through their scale subresource,
// for fleets not run by the operator: pool name → Deployment name.
type Deployments struct {
	Client    *kubeapi.Client
	Namespace string
	Pools     map[string]string
}

// NewDeployments builds the actuator from a connection config.
func NewDeployments(cfg *kubeapi.Config, namespace string, pools map[string]string) (*Deployments, error) {
	if len(pools) == 0 {
		return nil, errors.New("planner/kube: no deployments")
	}
	c, err := kubeapi.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("planner/kube: %w", err)
	}
	return &Deployments{Client: c, Namespace: namespace, Pools: pools}, nil
}

func (d *Deployments) scalePath(name string) string {
	return "/apis/apps/v1/namespaces/" + url.PathEscape(d.Namespace) + "/deployments/" + url.PathEscape(name) + "/scale"
}

// scale is an autoscaling/v1 Scale.
type scale struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Replicas int32 `json:"replicas"`
	} `json:"spec"`
}

// Replicas implements planner.Actuator.
func (d *Deployments) Replicas(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	for pool, name := range d.Pools {
		var s scale
		if err := d.Client.Do(ctx, kubeapi.Request{Method: http.MethodGet, Path: d.scalePath(name)}, &s); err != nil {
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
	s := scale{APIVersion: "autoscaling/v1", Kind: "Scale"}
	s.Metadata.Name, s.Metadata.Namespace = name, d.Namespace
	s.Spec.Replicas = int32(n)
	body, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("planner/kube: %w", err)
	}
	if err := d.Client.Do(ctx, kubeapi.Request{Method: http.MethodPut, Path: d.scalePath(name), Query: fieldManager, Body: body}, nil); err != nil {
		return fmt.Errorf("planner/kube: scale deployment %s/%s to %d: %w", d.Namespace, name, n, err)
	}
	return nil
}
