package discovery

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tandemllm/tandem/health"
)

const (
	kubeNS      = "serving"
	kubeSel     = "app.kubernetes.io/component=tandem-worker"
	kubeService = "tandem-workers"
)

func kubePod(name string, ready bool, record *Record) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kubeNS, Labels: map[string]string{"app.kubernetes.io/component": "tandem-worker"}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"},
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	if record != nil {
		b, _ := record.Marshal()
		p.Annotations = map[string]string{DefaultAnnotation: string(b)}
	}
	return p
}

func kubeSlice(ready map[string]bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: kubeService + "-abc", Namespace: kubeNS, Labels: map[string]string{discoveryv1.LabelServiceName: kubeService}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	names := make([]string, 0, len(ready))
	for n := range ready {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		r := ready[n]
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{"10.0.0.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: &r},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: n, Namespace: kubeNS},
		})
	}
	return s
}

func newKube(t *testing.T, cs *fake.Clientset, pod, service string, board *health.Board) *Kube {
	t.Helper()
	k, err := NewKube(KubeConfig{Clients: cs, Namespace: kubeNS, Selector: kubeSel, Service: service, PodName: pod,
		Common: Common{Board: board, Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestKubeWatch follows pods and EndpointSlices through the states a
// worker pod goes through, against client-go's fake clientset.
func TestKubeWatch(t *testing.T) {
	ctx := context.Background()
	r1, r2 := testRecord("w1"), testRecord("w2")
	other := kubePod("web", true, nil)
	other.Labels = map[string]string{"app": "web"}
	cs := fake.NewClientset(
		kubePod("w1", true, &r1),
		kubePod("w2", true, &r2),
		kubePod("w3", true, nil), // not registered yet
		other,
		kubeSlice(map[string]bool{"w1": true, "w2": false, "w3": true}),
	)
	board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
	w := startWatch(t, newKube(t, cs, "", kubeService, board))
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

	slicesAPI := cs.DiscoveryV1().EndpointSlices(kubeNS)
	if _, err := slicesAPI.Update(ctx, kubeSlice(map[string]bool{"w1": true, "w2": true, "w3": true}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("w2 ready", "w1", "w2")

	// w3 registers itself: the record goes into its own pod's annotation.
	k3 := newKube(t, cs, "w3", kubeService, nil)
	if _, err := k3.Register(ctx, testRecord("w1")); err == nil {
		t.Fatal("registered under an id that is not the pod name")
	}
	l3, err := k3.Register(ctx, testRecord("w3"))
	if err != nil {
		t.Fatal(err)
	}
	expect("w3 registered", "w1", "w2", "w3")

	// A failing readiness probe takes w1 out; a terminating w2 too.
	term := true
	sl := kubeSlice(map[string]bool{"w1": false, "w2": true, "w3": true})
	sl.Endpoints[1].Conditions.Terminating = &term
	if _, err := slicesAPI.Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("w1 unready, w2 terminating", "w3")

	if err := l3.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	expect("w3 revoked", []string{}...)
	p, err := cs.CoreV1().Pods(kubeNS).Get(ctx, "w3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Annotations[DefaultAnnotation]; ok {
		t.Fatal("annotation left after Revoke")
	}

	if _, err := slicesAPI.Update(ctx, kubeSlice(map[string]bool{"w1": true, "w2": true}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("w1 and w2 ready again", "w1", "w2")
	if err := cs.CoreV1().Pods(kubeNS).Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("w1 deleted", "w2")

	// A broken annotation is reported, not fatal.
	bad := kubePod("w4", true, nil)
	bad.Annotations = map[string]string{DefaultAnnotation: "{oops"}
	if _, err := cs.CoreV1().Pods(kubeNS).Create(ctx, bad, metav1.CreateOptions{}); err != nil {
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
	r1, r2 := testRecord("w1"), testRecord("w2")
	cs := fake.NewClientset(kubePod("w1", true, &r1), kubePod("w2", false, &r2))
	w := startWatch(t, newKube(t, cs, "", "", nil))
	w.waitFor(10*time.Second, "w1 only", func() bool { return w.synced && len(w.live) == 1 && w.live["w1"].ID == "w1" })
	if _, err := cs.CoreV1().Pods(kubeNS).UpdateStatus(context.Background(), kubePod("w2", true, &r2), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitFor(10*time.Second, "w2 ready", func() bool { return len(w.live) == 2 })
}

// TestKubeAPIErrors: a registration the API refuses fails with the cause;
// a failing watch raises discovery_unavailable.
func TestKubeAPIErrors(t *testing.T) {
	r1 := testRecord("w1")
	cs := fake.NewClientset(kubePod("w1", true, &r1))
	denied := errors.New("pods is forbidden")
	cs.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, denied })
	if _, err := newKube(t, cs, "w1", "", nil).Register(context.Background(), testRecord("w1")); !errors.Is(err, denied) {
		t.Fatalf("Register error %v, want it to wrap the API's", err)
	}
	cs.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) { return true, nil, denied })
	board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = newKube(t, cs, "", "", board).Watch(ctx, func(Event) {}) }()
	deadline := time.Now().Add(10 * time.Second)
	for !board.IsActive(DiagUnavailable, "kube") {
		if time.Now().After(deadline) {
			t.Fatal("discovery_unavailable not raised for a failing watch")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
