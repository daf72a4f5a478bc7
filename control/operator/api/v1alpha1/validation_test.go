package v1alpha1_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tandemllm/tandem/control/operator/api/v1alpha1"
	"github.com/tandemllm/tandem/control/operator/internal/optest"
	"github.com/tandemllm/tandem/internal/kubetest"
)

// CRDFile is the generated CRD, relative to this package.
const CRDFile = "../../../../deploy/crd/tandem.dev_tandemdeployments.yaml"

func ptr[T any](v T) *T { return &v }

// goodObject is a valid aggregated deployment; the cases below break one
// thing each.
func goodObject(name string) *v1alpha1.TandemDeployment {
	return &v1alpha1.TandemDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "serving"},
		Spec: v1alpha1.TandemDeploymentSpec{
			Model: v1alpha1.ModelSpec{Name: "tandem-mock"},
			KV:    v1alpha1.KVSpec{BlockSize: 16},
			Pools: []v1alpha1.PoolSpec{{Name: "main", Replicas: 2, Engine: v1alpha1.EngineSpec{Kind: "mocker"}}},
		},
	}
}

func disaggPools() []v1alpha1.PoolSpec {
	return []v1alpha1.PoolSpec{
		{Name: "prefill", Role: "prefill", Replicas: 1, Engine: v1alpha1.EngineSpec{Kind: "mocker"}},
		{Name: "decode", Role: "decode", Replicas: 2, Engine: v1alpha1.EngineSpec{Kind: "mocker"}},
	}
}

func newClient(t *testing.T, s *kubetest.Server) client.Client {
	t.Helper()
	sch := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(sch); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(optest.Config(s), client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestServerSideValidation installs the generated CRD into a real API
// server and submits objects with dry-run (what `kubectl apply
// --dry-run=server` does): good ones are accepted; each bad one is refused
// with a message that names the offending field.
func TestServerSideValidation(t *testing.T) {
	s := kubetest.Start(t, nil, "serving")
	s.InstallCRDs(t, CRDFile)
	c := newClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	good := []struct {
		name string
		mod  func(*v1alpha1.TandemDeployment)
	}{
		{"aggregated mocker", func(*v1alpha1.TandemDeployment) {}},
		{"disagg always, prefill and decode", func(o *v1alpha1.TandemDeployment) {
			o.Spec.Disaggregation.Mode = "always"
			o.Spec.Pools = disaggPools()
		}},
		{"vllm pool with image, zero replicas", func(o *v1alpha1.TandemDeployment) {
			o.Spec.Model.Source = "/models/qwen3"
			o.Spec.Pools = []v1alpha1.PoolSpec{{Name: "gpu", Replicas: 0, Engine: v1alpha1.EngineSpec{Kind: "vllm", Image: "vllm/vllm-openai:v0.11.0"}}}
		}},
		{"pool blockSize equal to kv.blockSize", func(o *v1alpha1.TandemDeployment) { o.Spec.Pools[0].BlockSize = ptr(int32(16)) }},
	}
	for _, tc := range good {
		t.Run("accept/"+tc.name, func(t *testing.T) {
			o := goodObject("good")
			tc.mod(o)
			if err := c.Create(ctx, o, client.DryRunAll); err != nil {
				t.Fatalf("refused a good object: %v", err)
			}
		})
	}

	bad := []struct {
		name string
		mod  func(*v1alpha1.TandemDeployment)
		want []string // substrings of the error: the field, and why
	}{
		{"negative replicas", func(o *v1alpha1.TandemDeployment) { o.Spec.Pools[0].Replicas = -1 },
			[]string{"spec.pools[0].replicas", "greater than or equal to 0"}},
		{"zero block size", func(o *v1alpha1.TandemDeployment) { o.Spec.KV.BlockSize = 0 },
			[]string{"spec.kv.blockSize", "greater than or equal to 1"}},
		{"pool block size differs", func(o *v1alpha1.TandemDeployment) { o.Spec.Pools[0].BlockSize = ptr(int32(32)) },
			[]string{"spec.pools", "must equal kv.blockSize"}},
		{"disagg always without prefill pool", func(o *v1alpha1.TandemDeployment) { o.Spec.Disaggregation.Mode = "always" },
			[]string{"spec.disaggregation.mode", "needs a prefill pool and a decode pool"}},
		{"decode pool without prefill pool", func(o *v1alpha1.TandemDeployment) { o.Spec.Pools = disaggPools()[1:] },
			[]string{"spec.pools", "a decode pool needs a prefill pool"}},
		{"prefill pool without decode pool", func(o *v1alpha1.TandemDeployment) { o.Spec.Pools = disaggPools()[:1] },
			[]string{"spec.pools", "a prefill pool needs a decode pool"}},
		{"no model name", func(o *v1alpha1.TandemDeployment) { o.Spec.Model.Name = "" },
			[]string{"spec.model.name"}},
		{"native engine with no model", func(o *v1alpha1.TandemDeployment) { o.Spec.Pools[0].Engine.Kind = "native" },
			[]string{"spec.model.source", "a native engine needs model.source"}},
		{"upstream engine with no image", func(o *v1alpha1.TandemDeployment) { o.Spec.Pools[0].Engine.Kind = "vllm" },
			[]string{"spec.pools[0].engine.image", "needs engine.image"}},
		{"unknown engine", func(o *v1alpha1.TandemDeployment) { o.Spec.Pools[0].Engine.Kind = "tgi" },
			[]string{"spec.pools[0].engine.kind", "Unsupported value"}},
		{"unknown router mode", func(o *v1alpha1.TandemDeployment) { o.Spec.Router.Mode = "sticky" },
			[]string{"spec.router.mode", "Unsupported value"}},
		{"duplicate pool names", func(o *v1alpha1.TandemDeployment) { o.Spec.Pools = append(o.Spec.Pools, o.Spec.Pools[0]) },
			[]string{"spec.pools[1]", "Duplicate value"}},
		{"pool name not a DNS label", func(o *v1alpha1.TandemDeployment) { o.Spec.Pools[0].Name = "Main_Pool" },
			[]string{"spec.pools[0].name"}},
		{"no pools", func(o *v1alpha1.TandemDeployment) { o.Spec.Pools = nil },
			[]string{"spec.pools"}},
		{"nats event plane without URL", func(o *v1alpha1.TandemDeployment) { o.Spec.Router.EventPlane = "nats" },
			[]string{"spec.router.natsURL", "needs router.natsURL"}},
		{"etcd discovery without endpoints", func(o *v1alpha1.TandemDeployment) { o.Spec.Discovery.Backend = "etcd" },
			[]string{"spec.discovery.etcdEndpoints"}},
	}
	for _, tc := range bad {
		t.Run("refuse/"+tc.name, func(t *testing.T) {
			o := goodObject("bad")
			tc.mod(o)
			err := c.Create(ctx, o, client.DryRunAll)
			if err == nil {
				t.Fatal("accepted a bad object")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
		})
	}
	// Dry-run wrote nothing.
	var list v1alpha1.TandemDeploymentList
	if err := c.List(ctx, &list, client.InNamespace("serving")); err != nil || len(list.Items) != 0 {
		t.Fatalf("dry-run left objects: %d, %v", len(list.Items), err)
	}
}
