package kube

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/internal/kubeapi"
	"github.com/tandemllm/tandem/internal/kubetest"
)

const crdFile = "../../../deploy/crd/tandem.dev_tandemdeployments.yaml"

// TestActuatorsAgainstAPIServer patches a real TandemDeployment's pool
// replicas and a real Deployment's scale subresource through a real
// kube-apiserver (which validates the patch against the CRD's schema), and
// checks that an identity without RBAC rights is refused.
func TestActuatorsAgainstAPIServer(t *testing.T) {
	const ns = "serving"
	s := kubetest.Start(t, nil, ns)
	s.InstallCRDs(t, crdFile)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	pool := func(name string, replicas int) kubetest.Object {
		return kubetest.Object{"name": name, "role": name, "replicas": replicas, "engine": kubetest.Object{"kind": "mocker"}}
	}
	td := kubetest.Object{
		"apiVersion": "tandem.dev/v1alpha1", "kind": "TandemDeployment",
		"metadata": kubetest.Object{"name": "llm", "namespace": ns},
		"spec": kubetest.Object{
			"model":          kubetest.Object{"name": "tandem-mock"},
			"kv":             kubetest.Object{"blockSize": 16},
			"disaggregation": kubetest.Object{"mode": "always"},
			"pools":          []any{pool("prefill", 1), pool("decode", 2)},
		},
	}
	admin := s.Client(t)
	tdPath := "/apis/tandem.dev/v1alpha1/namespaces/" + ns + "/tandemdeployments"
	if _, err := admin.Create(ctx, tdPath, td); err != nil {
		t.Fatalf("create TandemDeployment: %v", err)
	}

	a, err := NewTandemDeployment(s.APIConfig(), ns, "llm")
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Replicas(ctx)
	if err != nil || got["prefill"] != 1 || got["decode"] != 2 {
		t.Fatalf("Replicas %v %v, want prefill 1 decode 2", got, err)
	}
	if err := a.Scale(ctx, "decode", 5); err != nil {
		t.Fatal(err)
	}
	if err := a.Scale(ctx, "prefill", 0); err != nil { // zero keeps the model advertised
		t.Fatal(err)
	}
	u, err := admin.Get(ctx, tdPath+"/llm")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"prefill": 0, "decode": 5}
	for _, p := range u.Slice("spec", "pools") {
		m := p.(map[string]any)
		if n, ok := kubetest.Int(m["replicas"]); !ok || n != want[m["name"].(string)] {
			t.Fatalf("stored pool %v, want replicas %d", m, want[m["name"].(string)])
		}
	}
	if f := u.Slice("metadata", "managedFields"); !strings.Contains(strings.Join(managers(f), ","), "tandem-planner") {
		t.Fatalf("managed fields %v do not name tandem-planner", managers(f))
	}
	if err := a.Scale(ctx, "nope", 1); err == nil || !strings.Contains(err.Error(), `no pool "nope"`) {
		t.Fatalf("unknown pool: %v", err)
	}
	if err := a.Scale(ctx, "decode", -1); err == nil {
		t.Fatal("negative replicas accepted")
	}

	// A plain Deployment, scaled through its scale subresource (no
	// controller runs: the spec is what the planner sets).
	dep := kubetest.Object{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": kubetest.Object{"name": "workers", "namespace": ns},
		"spec": kubetest.Object{"replicas": 1,
			"selector": kubetest.Object{"matchLabels": map[string]string{"app": "w"}},
			"template": kubetest.Object{"metadata": kubetest.Object{"labels": map[string]string{"app": "w"}},
				"spec": kubetest.Object{"containers": []any{kubetest.Object{"name": "w", "image": "tandem"}}}}},
	}
	depPath := "/apis/apps/v1/namespaces/" + ns + "/deployments"
	if _, err := admin.Create(ctx, depPath, dep); err != nil {
		t.Fatal(err)
	}
	d, err := NewDeployments(s.APIConfig(), ns, map[string]string{"agg": "workers"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Scale(ctx, "agg", 4); err != nil {
		t.Fatal(err)
	}
	if got, err := d.Replicas(ctx); err != nil || got["agg"] != 4 {
		t.Fatalf("Deployment replicas %v %v, want 4", got, err)
	}
	if stored, err := admin.Get(ctx, depPath+"/workers"); err != nil || stored.Get("spec", "replicas") != json.Number("4") {
		t.Fatalf("stored Deployment %v %v", stored, err)
	}

	// A stranger (authenticated, no RBAC grant) can neither read nor
	// patch.
	sa, _ := NewTandemDeployment(s.APIConfigFor(kubetest.StrangerUser), ns, "llm")
	if err := sa.Scale(ctx, "decode", 1); !kubeapi.IsStatus(err, http.StatusForbidden) {
		t.Fatalf("stranger's patch: %v, want Forbidden", err)
	}
	sd, _ := NewDeployments(s.APIConfigFor(kubetest.StrangerUser), ns, map[string]string{"agg": "workers"})
	if err := sd.Scale(ctx, "agg", 1); !kubeapi.IsStatus(err, http.StatusForbidden) {
		t.Fatalf("stranger's scale: %v, want Forbidden", err)
	}
}

func managers(fs []any) []string {
	var out []string
	for _, f := range fs {
		m, _ := f.(map[string]any)
		s, _ := m["manager"].(string)
		out = append(out, s)
	}
	return out
}
