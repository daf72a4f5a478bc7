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
	clients, err := NewClientsForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	common := Common{Board: health.NewBoard(slog.New(slog.DiscardHandler), nil), Logger: slog.New(slog.DiscardHandler)}
	mkPod := func(ns, name string) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/component": "tandem-worker"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "w", Image: "x"}}}}
		p, err := clients.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if _, err := clients.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
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
