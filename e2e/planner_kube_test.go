package e2e

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/tandemllm/tandem/internal/kubetest"
)

// TestPlannerScalesTandemDeployment: `tandem planner --actuator
// tandemdeployment` against a live `tandem serve` and a real API server
// raises a pool below its --pool minimum by patching the object.
func TestPlannerScalesTandemDeployment(t *testing.T) {
	longParallel(t)
	if secure.on {
		t.Skip("plain HTTP test")
	}
	const ns = "serving"
	s := kubetest.Start(t, nil, ns)
	s.InstallCRDs(t, "../deploy/crd/tandem.dev_tandemdeployments.yaml")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	td := kubetest.Object{
		"apiVersion": "tandem.dev/v1alpha1", "kind": "TandemDeployment",
		"metadata": kubetest.Object{"name": "llm", "namespace": ns},
		"spec": kubetest.Object{"model": kubetest.Object{"name": "tandem-mock"}, "kv": kubetest.Object{"blockSize": 16},
			"pools": []any{kubetest.Object{"name": "main", "replicas": 1, "engine": kubetest.Object{"kind": "mocker"}}}},
	}
	admin := s.Client(t)
	tdPath := "/apis/tandem.dev/v1alpha1/namespaces/" + ns + "/tandemdeployments"
	if _, err := admin.Create(ctx, tdPath, td); err != nil {
		t.Fatal(err)
	}
	srv := startTandem(t, "serve --http-addr 127.0.0.1:0 --workers 1")
	startProc(t, "planner", "planner --frontend-metrics "+srv.url+"/metrics --actuator tandemdeployment --kubeconfig "+s.Kubeconfig+
		" --namespace "+ns+" --name llm --pool main=aggregated:3:4 --interval 200ms --planner-listen 127.0.0.1:0",
		regexp.MustCompile(`planner: policy`))
	for {
		u, err := admin.Get(ctx, tdPath+"/llm")
		if err != nil {
			t.Fatal(err)
		}
		pools := u.Slice("spec", "pools")
		if r, _ := kubetest.Int(pools[0].(map[string]any)["replicas"]); r == 3 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the planner never raised pool main to its minimum of 3: %v", pools)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
