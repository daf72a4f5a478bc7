package discovery

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/kubeapi"
	"github.com/tandemllm/tandem/internal/kubetest"
)

const (
	kubeNS      = "serving"
	kubeSel     = "app.kubernetes.io/component=tandem-worker"
	kubeService = "tandem-workers"
)

// kubeFixture is a real kube-apiserver with an admin client to set the
// scene (the backend under test uses its own).
type kubeFixture struct {
	t     *testing.T
	s     *kubetest.Server
	admin *kubetest.Client
	api   *kubeapi.Client
	ctx   context.Context
	users []string
}

func newKubeFixture(t *testing.T, users ...string) *kubeFixture {
	t.Helper()
	s := kubetest.Start(t, users, kubeNS)
	f := &kubeFixture{t: t, s: s, users: users}
	f.admin = s.Client(t)
	var err error
	if f.api, err = NewClientsForConfig(s.APIConfig()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	f.ctx = ctx
	return f
}

const (
	podsPath   = "/api/v1/namespaces/" + kubeNS + "/pods"
	slicesPath = "/apis/discovery.k8s.io/v1/namespaces/" + kubeNS + "/endpointslices"
)

// pod creates a worker pod (its record, if any, in the annotation) and
// sets its status as a kubelet would.
func (f *kubeFixture) pod(name string, ready bool, record *Record, labels map[string]string) {
	f.t.Helper()
	if labels == nil {
		labels = map[string]string{"app.kubernetes.io/component": "tandem-worker"}
	}
	meta := kubetest.Object{"name": name, "labels": labels}
	if record != nil {
		b, _ := record.Marshal()
		meta["annotations"] = map[string]string{DefaultAnnotation: string(b)}
	}
	p, err := f.admin.Create(f.ctx, podsPath, kubetest.Object{"apiVersion": "v1", "kind": "Pod", "metadata": meta,
		"spec": kubetest.Object{"containers": []any{kubetest.Object{"name": "w", "image": "x"}}}})
	if err != nil {
		f.t.Fatal(err)
	}
	f.setReady(p, ready)
}

func (f *kubeFixture) setReady(p kubetest.Object, ready bool) {
	f.t.Helper()
	st := "False"
	if ready {
		st = "True"
	}
	p["status"] = kubetest.Object{"phase": "Running", "conditions": []any{kubetest.Object{"type": "Ready", "status": st}}}
	if _, err := f.admin.Update(f.ctx, podsPath+"/"+p.Name()+"/status", p); err != nil {
		f.t.Fatal(err)
	}
}

// slice writes the Service's one EndpointSlice: pod name → ready, and
// the names in terminating marked terminating.
func (f *kubeFixture) slice(ready map[string]bool, terminating ...string) {
	f.t.Helper()
	name := kubeService + "-abc"
	s := kubetest.Object{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
		"metadata":    kubetest.Object{"name": name, "namespace": kubeNS, "labels": map[string]string{"kubernetes.io/service-name": kubeService}},
		"addressType": "IPv4"}
	names := make([]string, 0, len(ready))
	for n := range ready {
		names = append(names, n)
	}
	slices.Sort(names)
	eps := []any{}
	for _, n := range names {
		cond := kubetest.Object{"ready": ready[n]}
		if slices.Contains(terminating, n) {
			cond["terminating"] = true
		}
		eps = append(eps, kubetest.Object{
			"addresses":  []string{"10.0.0.1"},
			"conditions": cond,
			"targetRef":  kubetest.Object{"kind": "Pod", "name": n, "namespace": kubeNS},
		})
	}
	s["endpoints"] = eps
	old, err := f.admin.Get(f.ctx, slicesPath+"/"+name)
	if err != nil {
		if _, err := f.admin.Create(f.ctx, slicesPath, s); err != nil {
			f.t.Fatal(err)
		}
		return
	}
	s["metadata"].(kubetest.Object)["resourceVersion"] = old.Str("metadata", "resourceVersion")
	if _, err := f.admin.Update(f.ctx, slicesPath+"/"+name, s); err != nil {
		f.t.Fatal(err)
	}
}

func (f *kubeFixture) newKube(clients *kubeapi.Client, pod, service string, board *health.Board) *Kube {
	f.t.Helper()
	k, err := NewKube(KubeConfig{Clients: clients, Namespace: kubeNS, Selector: kubeSel, Service: service, PodName: pod,
		Common: Common{Board: board, Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		f.t.Fatal(err)
	}
	return k
}

// TestKubeWatch follows pods and EndpointSlices through the states a
// worker pod goes through, against a real kube-apiserver.
func TestKubeWatch(t *testing.T) {
	f := newKubeFixture(t)
	ctx := f.ctx
	r1, r2 := testRecord("w1"), testRecord("w2")
	f.pod("w1", true, &r1, nil)
	f.pod("w2", true, &r2, nil)
	f.pod("w3", true, nil, nil) // not registered yet
	f.pod("web", true, nil, map[string]string{"app": "web"})
	f.slice(map[string]bool{"w1": true, "w2": false, "w3": true})
	board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
	w := startWatch(t, f.newKube(f.api, "", kubeService, board))
	w.waitFor(10*time.Second, "sync", func() bool { return w.synced })
	expect := func(what string, ids ...string) {
		t.Helper()
		w.waitFor(10*time.Second, what, func() bool {
			got := make([]string, 0, len(w.live))
			for id := range w.live {
				got = append(got, id)
			}
			slices.Sort(got)
			return slices.Equal(got, ids)
		})
	}
	expect("w1 only (w2 not ready, w3 unregistered)", "w1")
	if got := w.live["w1"]; got != r1 {
		t.Fatalf("record from the pod annotation %+v, want %+v (kv_share included)", got, r1)
	}

	f.slice(map[string]bool{"w1": true, "w2": true, "w3": true})
	expect("w2 ready", "w1", "w2")

	// w3 registers itself: the record goes into its own pod's annotation.
	k3 := f.newKube(f.api, "w3", kubeService, nil)
	if _, err := k3.Register(ctx, testRecord("w1")); err == nil {
		t.Fatal("registered under an id that is not the pod name")
	}
	l3, err := k3.Register(ctx, testRecord("w3"))
	if err != nil {
		t.Fatal(err)
	}
	expect("w3 registered", "w1", "w2", "w3")
	// Registering again replaces the record; revoking the replaced lease
	// leaves the successor's.
	changed := testRecord("w3")
	changed.ContextLength = 512
	l3b, err := k3.Register(ctx, changed)
	if err != nil {
		t.Fatal(err)
	}
	w.waitFor(10*time.Second, "w3 changed", func() bool { return w.live["w3"].ContextLength == 512 })
	if err := l3.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	l3 = l3b

	// A failing readiness probe takes w1 out; a terminating w2 too.
	f.slice(map[string]bool{"w1": false, "w2": true, "w3": true}, "w2")
	expect("w1 unready, w2 terminating", "w3")

	if err := l3.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	expect("w3 revoked", []string{}...)
	p, err := f.admin.Get(ctx, podsPath+"/w3")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Map("metadata", "annotations")[DefaultAnnotation]; ok {
		t.Fatal("annotation left after Revoke")
	}

	f.slice(map[string]bool{"w1": true, "w2": true})
	expect("w1 and w2 ready again", "w1", "w2")
	if err := f.admin.Delete(ctx, podsPath+"/w1"); err != nil {
		t.Fatal(err)
	}
	expect("w1 deleted", "w2")

	// A broken annotation is reported, not fatal.
	bad := testRecord("w4")
	f.pod("w4", true, &bad, nil)
	p4, err := f.admin.Get(ctx, podsPath+"/w4")
	if err != nil {
		t.Fatal(err)
	}
	p4.Map("metadata", "annotations")[DefaultAnnotation] = "{oops"
	if _, err := f.admin.Update(ctx, podsPath+"/w4", p4); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !board.IsActive(DiagRecordInvalid, "pod:w4") {
		if time.Now().After(deadline) {
			t.Fatal("invalid record not reported")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestKubeWatchWithoutService: with no Service, the pod's own Ready
// condition decides.
func TestKubeWatchWithoutService(t *testing.T) {
	f := newKubeFixture(t)
	r1, r2 := testRecord("w1"), testRecord("w2")
	f.pod("w1", true, &r1, nil)
	f.pod("w2", false, &r2, nil)
	w := startWatch(t, f.newKube(f.api, "", "", nil))
	w.waitFor(10*time.Second, "w1 only", func() bool { return w.synced && len(w.live) == 1 && w.live["w1"].ID == "w1" })
	p, err := f.admin.Get(f.ctx, podsPath+"/w2")
	if err != nil {
		t.Fatal(err)
	}
	f.setReady(p, true)
	w.waitFor(10*time.Second, "w2 ready", func() bool { return len(w.live) == 2 })
}

// TestKubeAPIErrors: a registration the API refuses fails with the cause;
// a failing watch raises discovery_unavailable. The identities are real
// RBAC subjects: one with no rights, one that may list pods but not watch
// them.
func TestKubeAPIErrors(t *testing.T) {
	const lister = "tandem-test-lister"
	f := newKubeFixture(t, lister)
	r1 := testRecord("w1")
	f.pod("w1", true, &r1, nil)
	stranger, err := NewClientsForConfig(f.s.APIConfigFor(kubetest.StrangerUser))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.newKube(stranger, "w1", "", nil).Register(f.ctx, testRecord("w1")); !kubeapi.IsStatus(err, http.StatusForbidden) {
		t.Fatalf("Register error %v, want it to wrap the API's 403", err)
	}

	const rbacPath = "/apis/rbac.authorization.k8s.io/v1/namespaces/" + kubeNS
	if _, err := f.admin.Create(f.ctx, rbacPath+"/roles", kubetest.Object{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
		"metadata": kubetest.Object{"name": "list-pods"},
		"rules":    []any{kubetest.Object{"apiGroups": []string{""}, "resources": []string{"pods"}, "verbs": []string{"list"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.Create(f.ctx, rbacPath+"/rolebindings", kubetest.Object{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
		"metadata": kubetest.Object{"name": "list-pods"},
		"roleRef":  kubetest.Object{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "list-pods"},
		"subjects": []any{kubetest.Object{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": lister}}}); err != nil {
		t.Fatal(err)
	}
	listOnly, err := NewClientsForConfig(f.s.APIConfigFor(lister))
	if err != nil {
		t.Fatal(err)
	}
	// The binding reaches the authorizer's cache shortly: wait until the
	// list works, so that what fails below is the watch.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := listOnly.List(f.ctx, "/api/v1/namespaces/"+kubeNS+"/pods", kubeSel, func(json.RawMessage) error { return nil })
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("list with the Role: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	go func() { _ = f.newKube(listOnly, "", "", board).Watch(ctx, func(Event) {}) }()
	deadline = time.Now().Add(10 * time.Second)
	for !board.IsActive(DiagUnavailable, "kube") {
		if time.Now().After(deadline) {
			t.Fatal("discovery_unavailable not raised for a failing watch")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestKubeRelistOnGone: a watch answered 410 Gone (the version was
// compacted away) lists again and carries on from the new list; served by
// a stand-in API server, since a real one compacts only on its schedule.
func TestKubeRelistOnGone(t *testing.T) {
	r1, r2 := testRecord("w1"), testRecord("w2")
	pod := func(r Record) string {
		b, _ := r.Marshal()
		a, _ := json.Marshal(string(b))
		return `{"metadata":{"name":"` + r.ID + `","labels":{"app.kubernetes.io/component":"tandem-worker"},"annotations":{"` + DefaultAnnotation + `":` + string(a) + `}},` +
			`"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}`
	}
	var lists atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch {
		case q.Get("watch") == "" && lists.Add(1) == 1:
			_, _ = io.WriteString(w, `{"metadata":{"resourceVersion":"10"},"items":[`+pod(r1)+`]}`)
		case q.Get("watch") == "":
			_, _ = io.WriteString(w, `{"metadata":{"resourceVersion":"20"},"items":[`+pod(r1)+`,`+pod(r2)+`]}`)
		case q.Get("resourceVersion") == "10":
			w.WriteHeader(http.StatusGone)
			_, _ = io.WriteString(w, `{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version"}`)
		default:
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close) // after the watch's own cleanup ends its stream
	api, err := NewClientsForConfig(&kubeapi.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	k, err := NewKube(KubeConfig{Clients: api, Namespace: kubeNS, Selector: kubeSel, Common: Common{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, k)
	w.waitFor(10*time.Second, "w1 and w2 after the re-list", func() bool { return len(w.live) == 2 })
	if n := lists.Load(); n != 2 {
		t.Fatalf("%d lists, want 2", n)
	}
}
