package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"

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
	core, err := corev1client.NewForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	// The controller skips pods on a Node it cannot find; nothing runs on
	// this one, it only has to exist.
	if _, err := core.Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "workers"}, Spec: corev1.ServiceSpec{
		ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app.kubernetes.io/component": "tandem-worker"},
		Ports: []corev1.ServicePort{{Name: "grpc", Port: 9000}}}}
	if _, err := core.Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w1", Labels: map[string]string{"app.kubernetes.io/component": "tandem-worker"}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "w", Image: "x", Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 9000}}}}}}
	if _, err := core.Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	setReady := func(ready bool) {
		t.Helper()
		p, err := core.Pods(ns).Get(ctx, "w1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		// As a kubelet writes it; the API refuses loopback pod IPs.
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP, p.Status.PodIPs = "10.1.0.5", []corev1.PodIP{{IP: "10.1.0.5"}}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.Now()}}
		if _, err := core.Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
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
	sl, err := discoveryv1client.NewForConfigOrDie(s.Config()).EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=workers"})
	if err != nil || len(sl.Items) == 0 || sl.Items[0].Labels["endpointslice.kubernetes.io/managed-by"] != "endpointslice-controller.k8s.io" {
		t.Fatalf("EndpointSlices %+v, %v: want the controller's", sl, err)
	}
	setReady(false)
	expect(EventDelete, "not ready in the EndpointSlice")
}
