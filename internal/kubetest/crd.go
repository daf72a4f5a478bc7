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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	discoveryclient "k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Apply creates every object in the YAML files through the real API
// server (as `kubectl create -f` would; existing objects are left as they
// are), resolving kinds through the server's discovery, and returns them.
// Namespaced objects without a namespace go to "default".
func (s *Server) Apply(t testing.TB, files ...string) []*unstructured.Unstructured {
	t.Helper()
	return s.ApplyIn(t, "default", files...)
}

// ApplyIn is Apply with another namespace for objects that name none (as
// `kubectl create -n NS -f`).
func (s *Server) ApplyIn(t testing.TB, namespace string, files ...string) []*unstructured.Unstructured {
	t.Helper()
	dc, err := dynamic.NewForConfig(s.Config())
	must(t, err)
	disc, err := discoveryclient.NewDiscoveryClientForConfig(s.Config())
	must(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		must(t, err)
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("kubetest: %s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			gvk := u.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				mapper.Reset() // a CRD applied just before
				m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			}
			if err != nil {
				t.Fatalf("kubetest: %s: kind %s: %v", f, gvk, err)
			}
			var ri dynamic.ResourceInterface = dc.Resource(m.Resource)
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				ns := u.GetNamespace()
				if ns == "" {
					ns = namespace
				}
				ri = dc.Resource(m.Resource).Namespace(ns)
			}
			if _, err := ri.Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("kubetest: create %s %s from %s: %v", gvk.Kind, u.GetName(), f, err)
			}
			out = append(out, u)
		}
	}
	return out
}

// InstallCRDs applies the CustomResourceDefinitions in the YAML files
// (the real API server validates the schema and compiles the CEL rules)
// and waits until each is Established, i.e. its resource is served.
func (s *Server) InstallCRDs(t testing.TB, files ...string) {
	t.Helper()
	for _, u := range s.Apply(t, files...) {
		if u.GetKind() == "CustomResourceDefinition" {
			s.WaitEstablished(t, u.GetName())
		}
	}
}

// WaitEstablished waits up to a minute until the CustomResourceDefinition
// name (installed by any means: a test, helm) is Established.
func (s *Server) WaitEstablished(t testing.TB, name string) {
	t.Helper()
	dc, err := dynamic.NewForConfig(s.Config())
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		got, err := dc.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err == nil && established(got) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("kubetest: CRD %s not Established: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
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
