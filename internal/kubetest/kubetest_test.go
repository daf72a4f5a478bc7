package kubetest

import (
	"context"
	"testing"
	"time"

	"github.com/tandemllm/tandem/internal/kubeapi"
)

// TestServer starts the real API server and checks what the other tests
// rely on: the admin may create a Pod once the default ServiceAccount
// exists, a stranger's token is refused by RBAC, a wrong token by
// authentication, and a client that does not trust the serving
// certificate by TLS.
func TestServer(t *testing.T) {
	s := Start(t, nil, "ns1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := s.Client(t)
	pod := Object{"apiVersion": "v1", "kind": "Pod", "metadata": Object{"name": "p"},
		"spec": Object{"containers": []any{Object{"name": "c", "image": "x"}}}}
	if _, err := admin.Create(ctx, "/api/v1/namespaces/ns1/pods", pod); err != nil {
		t.Fatalf("admin create pod: %v", err)
	}
	stranger := s.ClientFor(t, StrangerUser)
	if _, err := stranger.List(ctx, "/api/v1/namespaces/ns1/pods", ""); !IsForbidden(err) {
		t.Fatalf("stranger list pods: %v, want Forbidden", err)
	}
	bad := s.APIConfig()
	bad.BearerToken = "not-a-token"
	badc, err := kubeapi.NewForConfig(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&Client{API: badc}).List(ctx, "/api/v1/namespaces/ns1/pods", ""); !IsUnauthorized(err) {
		t.Fatalf("bad token: %v, want Unauthorized", err)
	}
	uc, err := kubeapi.NewForConfig(&kubeapi.Config{Host: s.URL, BearerToken: s.Token(AdminUser)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&Client{API: uc}).List(ctx, "/api/v1/namespaces/ns1/pods", ""); err == nil {
		t.Fatal("a client with no CA trusted the self-signed certificate")
	}
}

// TestApply: Apply resolves kinds through discovery (core and grouped,
// namespaced and cluster-scoped, a CRD and then its custom resource), and
// the helpers read back what it wrote.
func TestApply(t *testing.T) {
	s := Start(t, nil, "ns1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.InstallCRDs(t, "../../deploy/crd/tandem.dev_tandemdeployments.yaml")
	objs := s.ApplyIn(t, "ns1", "testdata/apply.yaml")
	if len(objs) != 3 {
		t.Fatalf("applied %d objects, want 3", len(objs))
	}
	c := s.Client(t)
	cm, err := c.Get(ctx, "/api/v1/namespaces/ns1/configmaps/cfg")
	if err != nil || cm.Str("data", "k") != "v" {
		t.Fatalf("ConfigMap %v %v", cm, err)
	}
	if _, err := c.Get(ctx, "/apis/rbac.authorization.k8s.io/v1/clusterroles/kubetest-reader"); err != nil {
		t.Fatal(err)
	}
	td, err := c.Get(ctx, "/apis/tandem.dev/v1alpha1/namespaces/ns1/tandemdeployments/llm")
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := Int(td.Slice("spec", "pools")[0].(map[string]any)["replicas"]); !ok || n != 2 {
		t.Fatalf("pool replicas %v", td.Slice("spec", "pools"))
	}
	if err := c.Delete(ctx, "/api/v1/namespaces/ns1/configmaps/cfg"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "/api/v1/namespaces/ns1/configmaps/cfg"); !IsNotFound(err) {
		t.Fatalf("after delete: %v, want NotFound", err)
	}
	// Applying again leaves existing objects as they are.
	s.ApplyIn(t, "ns1", "testdata/apply.yaml")
}
