package kubetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// resource is a kind's REST resource, from the server's discovery.
type resource struct {
	name       string
	namespaced bool
}

// discovery resolves kinds to resources through the API server's
// discovery documents (/api/v1, /apis/GROUP/VERSION), as kubectl does.
type discovery struct {
	c     *Client
	cache map[string]map[string]resource // apiVersion → kind → resource
}

func (d *discovery) lookup(ctx context.Context, apiVersion, kind string, fresh bool) (resource, error) {
	kinds, ok := d.cache[apiVersion]
	if !ok || fresh {
		path := "/apis/" + apiVersion
		if !strings.Contains(apiVersion, "/") {
			path = "/api/" + apiVersion
		}
		var list struct {
			Resources []struct {
				Name       string `json:"name"`
				Namespaced bool   `json:"namespaced"`
				Kind       string `json:"kind"`
			} `json:"resources"`
		}
		raw, err := d.c.call(ctx, "GET", path, "", nil)
		if err != nil {
			return resource{}, err
		}
		b, _ := json.Marshal(raw)
		if err := json.Unmarshal(b, &list); err != nil {
			return resource{}, fmt.Errorf("discovery %s: %w", path, err)
		}
		kinds = map[string]resource{}
		for _, r := range list.Resources {
			if !strings.Contains(r.Name, "/") { // not a subresource
				kinds[r.Kind] = resource{r.Name, r.Namespaced}
			}
		}
		d.cache[apiVersion] = kinds
	}
	r, ok := kinds[kind]
	if !ok {
		return resource{}, fmt.Errorf("kind %s not served in %s", kind, apiVersion)
	}
	return r, nil
}

// Apply creates every object in the YAML files through the real API
// server (as `kubectl create -f` would; existing objects are left as they
// are), resolving kinds through the server's discovery, and returns them.
// Namespaced objects without a namespace go to "default".
func (s *Server) Apply(t testing.TB, files ...string) []Object {
	t.Helper()
	return s.ApplyIn(t, "default", files...)
}

// ApplyIn is Apply with another namespace for objects that name none (as
// `kubectl create -n NS -f`).
func (s *Server) ApplyIn(t testing.TB, namespace string, files ...string) []Object {
	t.Helper()
	return s.apply(t, namespace, nil, files)
}

// DryRunIn is ApplyIn as a server-side dry run with strict field
// validation (kubectl create --dry-run=server --validate=strict): the
// API server decodes and validates every document, refusing unknown or
// duplicate fields, and stores nothing.
func (s *Server) DryRunIn(t testing.TB, namespace string, files ...string) []Object {
	t.Helper()
	return s.apply(t, namespace, url.Values{"dryRun": {"All"}, "fieldValidation": {"Strict"}}, files)
}

func (s *Server) apply(t testing.TB, namespace string, query url.Values, files []string) []Object {
	t.Helper()
	c := s.Client(t)
	disc := &discovery{c: c, cache: map[string]map[string]resource{}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []Object
	for _, f := range files {
		b, err := os.ReadFile(f)
		must(t, err)
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("kubetest: %s: %v", f, err)
			}
			if len(doc) == 0 {
				continue
			}
			u := Object(doc)
			apiVersion, kind := u.Str("apiVersion"), u.Kind()
			r, err := disc.lookup(ctx, apiVersion, kind, false)
			for wait := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(wait); {
				// A CRD applied just before is served shortly.
				time.Sleep(100 * time.Millisecond)
				r, err = disc.lookup(ctx, apiVersion, kind, true)
			}
			if err != nil {
				t.Fatalf("kubetest: %s: kind %s %s: %v", f, apiVersion, kind, err)
			}
			prefix := "/apis/" + apiVersion
			if !strings.Contains(apiVersion, "/") {
				prefix = "/api/" + apiVersion
			}
			path := prefix + "/" + r.name
			if r.namespaced {
				ns := u.Namespace()
				if ns == "" {
					ns = namespace
				}
				path = prefix + "/namespaces/" + ns + "/" + r.name
			}
			if _, err := c.callQ(ctx, "POST", path, query, "", u); err != nil && !IsAlreadyExists(err) {
				t.Fatalf("kubetest: create %s %s from %s: %v", kind, u.Name(), f, err)
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
		if u.Kind() == "CustomResourceDefinition" {
			s.WaitEstablished(t, u.Name())
		}
	}
}

// WaitEstablished waits up to a minute until the CustomResourceDefinition
// name (installed by any means: a test, helm) is Established.
func (s *Server) WaitEstablished(t testing.TB, name string) {
	t.Helper()
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		got, err := c.Get(ctx, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+name)
		if err == nil && established(got) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("kubetest: CRD %s not Established: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func established(u Object) bool {
	for _, c := range u.Slice("status", "conditions") {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}
