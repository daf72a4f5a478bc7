package kubetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates the CustomResourceDefinitions in the YAML files (as
// `kubectl apply -f` would, through the real API server, which validates
// the schema and compiles the CEL rules) and waits until each is
// Established, i.e. its resource is served.
func (s *Server) InstallCRDs(t testing.TB, files ...string) {
	t.Helper()
	dc, err := dynamic.NewForConfig(s.Config())
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		must(t, err)
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("kubetest: %s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if _, err := dc.Resource(crdGVR).Create(ctx, &u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("kubetest: install CRD %s from %s: %v", u.GetName(), f, err)
			}
			names = append(names, u.GetName())
		}
	}
	for _, n := range names {
		for {
			u, err := dc.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{})
			if err == nil && established(u) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("kubetest: CRD %s not Established: %v", n, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func established(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}
