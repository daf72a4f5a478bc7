package kube

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/tandemllm/tandem/control/api/v1alpha1"
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

	td := &v1alpha1.TandemDeployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TandemDeployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: ns},
		Spec: v1alpha1.TandemDeploymentSpec{
			Model:          v1alpha1.ModelSpec{Name: "tandem-mock"},
			KV:             v1alpha1.KVSpec{BlockSize: 16},
			Disaggregation: v1alpha1.DisaggregationSpec{Mode: "always"},
			Pools: []v1alpha1.PoolSpec{
				{Name: "prefill", Role: "prefill", Replicas: 1, Engine: v1alpha1.EngineSpec{Kind: "mocker"}},
				{Name: "decode", Role: "decode", Replicas: 2, Engine: v1alpha1.EngineSpec{Kind: "mocker"}},
			},
		},
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
	u, err := res.Get(ctx, "llm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pools, _, _ := unstructured.NestedSlice(u.Object, "spec", "pools")
	want := map[string]int64{"prefill": 0, "decode": 5}
	for _, p := range pools {
		m := p.(map[string]any)
		if m["replicas"] != want[m["name"].(string)] {
			t.Fatalf("stored pool %v, want replicas %d", m, want[m["name"].(string)])
		}
	}
	if f := u.GetManagedFields(); !strings.Contains(strings.Join(managers(f), ","), "tandem-planner") {
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
	kc, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	one := int32(1)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "w"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "w"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "w", Image: "tandem"}}}}},
	}
	if _, err := kc.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
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
	if stored, err := kc.AppsV1().Deployments(ns).Get(ctx, "workers", metav1.GetOptions{}); err != nil || *stored.Spec.Replicas != 4 {
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

func managers(fs []metav1.ManagedFieldsEntry) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Manager)
	}
	return out
}
