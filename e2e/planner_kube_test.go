package e2e

import (
	"context"
	"regexp"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/tandemllm/tandem/control/api/v1alpha1"
	"github.com/tandemllm/tandem/internal/kubetest"
)

// TestPlannerScalesTandemDeployment: `tandem planner --actuator
// tandemdeployment` against a live `tandem serve` and a real API server
// raises a pool below its --pool minimum by patching the object.
func TestPlannerScalesTandemDeployment(t *testing.T) {
	skipShort(t)
	if secure.on {
		t.Skip("plain HTTP test")
	}
	const ns = "serving"
	s := kubetest.Start(t, nil, ns)
	s.InstallCRDs(t, "../deploy/crd/tandem.dev_tandemdeployments.yaml")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	td := &v1alpha1.TandemDeployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TandemDeployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: ns},
		Spec: v1alpha1.TandemDeploymentSpec{Model: v1alpha1.ModelSpec{Name: "tandem-mock"}, KV: v1alpha1.KVSpec{BlockSize: 16},
			Pools: []v1alpha1.PoolSpec{{Name: "main", Replicas: 1, Engine: v1alpha1.EngineSpec{Kind: "mocker"}}}},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(td)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	res := dc.Resource(v1alpha1.GroupVersion.WithResource("tandemdeployments")).Namespace(ns)
	if _, err := res.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	srv := startTandem(t, "serve --http-addr 127.0.0.1:0 --workers 1")
	startProc(t, "planner", "planner --frontend-metrics "+srv.url+"/metrics --actuator tandemdeployment --kubeconfig "+s.Kubeconfig+
		" --namespace "+ns+" --name llm --pool main=aggregated:3:4 --interval 200ms --planner-listen 127.0.0.1:0",
		regexp.MustCompile(`planner: policy`))
	for {
		u, err := res.Get(ctx, "llm", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pools, _, _ := unstructured.NestedSlice(u.Object, "spec", "pools")
		if r := pools[0].(map[string]any)["replicas"]; r == int64(3) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the planner never raised pool main to its minimum of 3: %v", pools)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
