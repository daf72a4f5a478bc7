package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/kubetest"
)

// TestKubeDiscoveryLatency measures, against the real API server, the time
// from a worker's registration (its annotation patch) to the frontend's
// watcher seeing it, with 100 pools of one ready worker pod each already
// registered, against a baseline of 1 pool measured in the same run.
// TANDEM_KUBE_BENCH=1 runs it (docs/benchmarks/kubernetes.md).
func TestKubeDiscoveryLatency(t *testing.T) {
	if os.Getenv("TANDEM_KUBE_BENCH") == "" {
		t.Skip("set TANDEM_KUBE_BENCH=1 to measure kube discovery latency")
	}
	s := kubetest.Start(t, nil, "few", "many")
	clients, err := NewClientsForConfig(s.APIConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	common := Common{Board: health.NewBoard(slog.New(slog.DiscardHandler), nil), Logger: slog.New(slog.DiscardHandler)}
	mkPod := func(ns, name string) {
		s.ReadyPod(t, ns, name, map[string]string{"app.kubernetes.io/component": "tandem-worker"})
	}
	register := func(ns, name string) Lease {
		k, err := NewKube(KubeConfig{Common: common, Clients: clients, Namespace: ns, Selector: kubeSel, PodName: name})
		if err != nil {
			t.Fatal(err)
		}
		l, err := k.Register(ctx, testRecord(name))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	type watcher struct {
		mu   sync.Mutex
		seen map[string]time.Time
	}
	watch := func(ns string) *watcher {
		w := &watcher{seen: map[string]time.Time{}}
		k, err := NewKube(KubeConfig{Common: common, Clients: clients, Namespace: ns, Selector: kubeSel})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_ = k.Watch(ctx, func(e Event) {
				if e.Type == EventPut {
					w.mu.Lock()
					w.seen[e.Record.ID] = time.Now()
					w.mu.Unlock()
				}
			})
		}()
		return w
	}
	background := map[string]int{"few": 1, "many": 100}
	watchers := map[string]*watcher{}
	for ns, n := range background {
		for i := range n {
			name := fmt.Sprintf("bg-%d", i)
			mkPod(ns, name)
			register(ns, name)
		}
		watchers[ns] = watch(ns)
	}
	const rounds = 20
	sum := map[string]time.Duration{}
	for r := range rounds {
		for _, ns := range []string{"few", "many"} {
			name := fmt.Sprintf("new-%d", r)
			mkPod(ns, name)
			t0 := time.Now()
			register(ns, name)
			w := watchers[ns]
			for {
				w.mu.Lock()
				at, ok := w.seen[name]
				w.mu.Unlock()
				if ok {
					sum[ns] += at.Sub(t0)
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("%s: %s never seen", ns, name)
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	few, many := sum["few"]/rounds, sum["many"]/rounds
	t.Logf("registration → watcher, mean of %d: 1 pool %v, 100 pools %v (%.2fx)", rounds, few.Round(100*time.Microsecond), many.Round(100*time.Microsecond), float64(many)/float64(few))
}

// TestKubeEndpointSliceMode runs the kube backend with --kube-service on a
// real control plane: kube-apiserver plus kube-controller-manager's
// EndpointSlice controller, which writes the Service's slices from the
// pods as it does in a cluster. A registered worker counts once its pod is
// ready in a slice, and leaves when the controller marks it not ready (a
// failed readiness probe), without revoking its record.
func TestKubeEndpointSliceMode(t *testing.T) {
	const ns = "eps"
	s := kubetest.Start(t, nil, ns)
	s.StartControllerManager(t, "endpointslice")
	clients, err := NewClientsForConfig(s.APIConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := s.Client(t)
	// The controller skips pods on a Node it cannot find; nothing runs on
	// this one, it only has to exist.
	if _, err := admin.Create(ctx, "/api/v1/nodes", kubetest.Object{"apiVersion": "v1", "kind": "Node", "metadata": kubetest.Object{"name": "node-1"}}); err != nil {
		t.Fatal(err)
	}
	nsPath := "/api/v1/namespaces/" + ns
	svc := kubetest.Object{"apiVersion": "v1", "kind": "Service", "metadata": kubetest.Object{"name": "workers"}, "spec": kubetest.Object{
		"clusterIP": "None", "selector": map[string]string{"app.kubernetes.io/component": "tandem-worker"},
		"ports": []any{kubetest.Object{"name": "grpc", "port": 9000}}}}
	if _, err := admin.Create(ctx, nsPath+"/services", svc); err != nil {
		t.Fatal(err)
	}
	pod := kubetest.Object{"apiVersion": "v1", "kind": "Pod",
		"metadata": kubetest.Object{"name": "w1", "labels": map[string]string{"app.kubernetes.io/component": "tandem-worker"}},
		"spec": kubetest.Object{"nodeName": "node-1", "containers": []any{kubetest.Object{"name": "w", "image": "x",
			"ports": []any{kubetest.Object{"name": "grpc", "containerPort": 9000}}}}}}
	if _, err := admin.Create(ctx, nsPath+"/pods", pod); err != nil {
		t.Fatal(err)
	}
	setReady := func(ready bool) {
		t.Helper()
		p, err := admin.Get(ctx, nsPath+"/pods/w1")
		if err != nil {
			t.Fatal(err)
		}
		st := "False"
		if ready {
			st = "True"
		}
		// As a kubelet writes it; the API refuses loopback pod IPs.
		p["status"] = kubetest.Object{"phase": "Running", "podIP": "10.1.0.5", "podIPs": []any{kubetest.Object{"ip": "10.1.0.5"}},
			"conditions": []any{kubetest.Object{"type": "Ready", "status": st, "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}}}
		if _, err := admin.Update(ctx, nsPath+"/pods/w1/status", p); err != nil {
			t.Fatal(err)
		}
	}
	common := Common{Board: health.NewBoard(slog.New(slog.DiscardHandler), nil), Logger: slog.New(slog.DiscardHandler)}
	reg, err := NewKube(KubeConfig{Common: common, Clients: clients, Namespace: ns, Selector: kubeSel, Service: "workers", PodName: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Register(ctx, testRecord("w1")); err != nil {
		t.Fatal(err)
	}
	watcher, err := NewKube(KubeConfig{Common: common, Clients: clients, Namespace: ns, Selector: kubeSel, Service: "workers"})
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan Event, 16)
	go func() { _ = watcher.Watch(ctx, func(e Event) { events <- e }) }()
	expect := func(typ EventType, what string) {
		t.Helper()
		for {
			select {
			case e := <-events:
				if e.Type == typ && e.Record.ID == "w1" {
					return
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("%s: no event within 60s", what)
			}
		}
	}
	// Registered but its pod not ready: no slice lists it ready yet.
	for quiet := time.After(500 * time.Millisecond); ; {
		select {
		case e := <-events:
			if e.Record.ID == "w1" {
				t.Fatalf("a worker whose pod is not ready was reported: %+v", e)
			}
			continue
		case <-quiet:
		}
		break
	}
	setReady(true)
	expect(EventPut, "ready in the controller's EndpointSlice")
	sl, err := admin.List(ctx, "/apis/discovery.k8s.io/v1/namespaces/"+ns+"/endpointslices", "kubernetes.io/service-name=workers")
	if err != nil || len(sl) == 0 || sl[0].Str("metadata", "labels", "endpointslice.kubernetes.io/managed-by") != "endpointslice-controller.k8s.io" {
		t.Fatalf("EndpointSlices %+v, %v: want the controller's", sl, err)
	}
	setReady(false)
	expect(EventDelete, "not ready in the EndpointSlice")
}
