package kubetest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
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
	admin, err := corev1client.NewForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if _, err := admin.Pods("ns1").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin create pod: %v", err)
	}
	stranger, _ := corev1client.NewForConfig(s.ConfigFor(StrangerUser))
	if _, err := stranger.Pods("ns1").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("stranger list pods: %v, want Forbidden", err)
	}
	bad := s.Config()
	bad.BearerToken = "not-a-token"
	badc, _ := corev1client.NewForConfig(bad)
	if _, err := badc.Pods("ns1").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("bad token: %v, want Unauthorized", err)
	}
	untrusting := &rest.Config{Host: s.URL, BearerToken: s.Token(AdminUser)}
	uc, _ := corev1client.NewForConfig(untrusting)
	if _, err := uc.Pods("ns1").List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("a client with no CA trusted the self-signed certificate")
	}
}
