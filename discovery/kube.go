package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tandemllm/tandem/health"
)

// DefaultAnnotation holds a worker's record on its pod.
const DefaultAnnotation = "tandem.dev/worker-record"

// KubeClients are the two API groups the backend uses. A full
// kubernetes.Interface (or client-go's fake clientset) provides both; asking
// for only these keeps the other API groups out of the binary.
type KubeClients interface {
	CoreV1() corev1client.CoreV1Interface
	DiscoveryV1() discoveryv1client.DiscoveryV1Interface
}

// KubeConfig configures the kube backend.
type KubeConfig struct {
	Common
	Clients KubeClients
	// Namespace of the workers' pods (default: this pod's, from
	// POD_NAMESPACE).
	Namespace string
	// Selector picks the worker pods (a label selector, e.g.
	// "app.kubernetes.io/component=tandem-worker").
	Selector string
	// Service names the workers' Service: a pod counts only while one of
	// its EndpointSlices lists it ready, so a pod that fails its readiness
	// probe or is terminating takes no new requests. Empty: the pod's own
	// Ready condition decides.
	Service string
	// PodName is the registering worker's own pod (default: POD_NAME,
	// set through the downward API).
	PodName string
	// Annotation carries the record (default DefaultAnnotation).
	Annotation string
	// Resync re-delivers the informers' caches (default 5 minutes).
	Resync time.Duration
}

// Kube is the Kubernetes backend: workers are pods selected by label, each
// with its record in an annotation it writes on its own pod; readiness
// comes from the Service's EndpointSlices; watchers use client-go
// informers. The pod's lifetime is the lease: a dead pod leaves its
// EndpointSlices (not ready) at once and the API with its deletion.
type Kube struct {
	cfg KubeConfig

	mu     sync.Mutex
	leases map[*kubeLease]struct{}
	closed bool
}

// NewKube returns the backend. The clients come from the caller (in a pod:
// NewInClusterClients).
func NewKube(cfg KubeConfig) (*Kube, error) {
	cfg.Common = cfg.Common.withDefaults("discovery.kube")
	if cfg.Clients == nil {
		return nil, errors.New("discovery: kube backend needs API clients")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = os.Getenv("POD_NAMESPACE")
	}
	if cfg.Namespace == "" {
		return nil, errors.New("discovery: kube backend needs a namespace (--kube-namespace or POD_NAMESPACE)")
	}
	if cfg.PodName == "" {
		cfg.PodName = os.Getenv("POD_NAME")
	}
	if cfg.Annotation == "" {
		cfg.Annotation = DefaultAnnotation
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 5 * time.Minute
	}
	if _, err := labels.Parse(cfg.Selector); err != nil {
		return nil, fmt.Errorf("discovery: kube selector %q: %w", cfg.Selector, err)
	}
	return &Kube{cfg: cfg, leases: map[*kubeLease]struct{}{}}, nil
}

type inClusterClients struct {
	core corev1client.CoreV1Interface
	disc discoveryv1client.DiscoveryV1Interface
}

func (c inClusterClients) CoreV1() corev1client.CoreV1Interface                { return c.core }
func (c inClusterClients) DiscoveryV1() discoveryv1client.DiscoveryV1Interface { return c.disc }

// NewInClusterClients builds the clients from the pod's service account.
func NewInClusterClients() (KubeClients, error) {
	rc, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, fmt.Errorf("discovery: kube: not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST is unset): pass --kubeconfig FILE to reach a cluster from outside, or another --discovery (file, etcd, nats): %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("discovery: kube in-cluster config: %w", err)
	}
	return NewClientsForConfig(rc)
}

// NewKubeconfigClients builds the clients from a kubeconfig file (a
// process outside the cluster, or a test against a real API server).
func NewKubeconfigClients(path string) (KubeClients, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("discovery: kubeconfig %s: %w", path, err)
	}
	return NewClientsForConfig(rc)
}

// NewClientsForConfig builds the clients from a REST config.
func NewClientsForConfig(rc *rest.Config) (KubeClients, error) {
	core, err := corev1client.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("discovery: kube client: %w", err)
	}
	disc, err := discoveryv1client.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("discovery: kube client: %w", err)
	}
	return inClusterClients{core: core, disc: disc}, nil
}

// Register implements Registry by writing the record into this worker's
// own pod annotation. The record's id must be the pod name: ids stay
// unique for free, and a watcher can tie the record to the pod's
// readiness.
func (k *Kube) Register(ctx context.Context, rec Record) (Lease, error) {
	val, err := rec.Marshal()
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	closed := k.closed
	k.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if k.cfg.PodName == "" {
		return nil, errors.New("discovery: kube registration needs the pod name (POD_NAME from the downward API)")
	}
	if rec.ID != k.cfg.PodName {
		return nil, fmt.Errorf("discovery: kube: worker id %q must be the pod name %q", rec.ID, k.cfg.PodName)
	}
	if err := k.annotate(ctx, &val); err != nil {
		return nil, err
	}
	l := &kubeLease{k: k}
	k.mu.Lock()
	k.leases[l] = struct{}{}
	k.mu.Unlock()
	return l, nil
}

// annotate sets (val != nil) or removes the record annotation with a JSON
// merge patch, which touches nothing else on the pod.
func (k *Kube) annotate(ctx context.Context, val *[]byte) error {
	var v any
	if val != nil {
		v = string(*val)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{k.cfg.Annotation: v}}})
	if err != nil {
		return fmt.Errorf("discovery: kube patch: %w", err)
	}
	_, err = k.cfg.Clients.CoreV1().Pods(k.cfg.Namespace).Patch(ctx, k.cfg.PodName, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("discovery: kube: annotate pod %s/%s: %w", k.cfg.Namespace, k.cfg.PodName, err)
	}
	return nil
}

type kubeLease struct {
	k    *Kube
	once sync.Once
}

// Revoke implements Lease: the annotation goes, and watchers drop the
// worker before its readiness changes.
func (l *kubeLease) Revoke(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		l.k.mu.Lock()
		delete(l.k.leases, l)
		l.k.mu.Unlock()
		err = l.k.annotate(ctx, nil)
	})
	return err
}

// Watch implements Registry with two informers, pods and EndpointSlices;
// every change recomputes the live set from their caches.
func (k *Kube) Watch(ctx context.Context, fn func(Event)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sel, _ := labels.Parse(k.cfg.Selector)
	ns := k.cfg.Namespace
	pods := k.cfg.Clients.CoreV1().Pods(ns)
	// The WatchList semantics wrapper lets clients that cannot stream a
	// list (client-go's fake, older API servers) fall back to list+watch.
	podInf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = k.cfg.Selector
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = k.cfg.Selector
			return pods.Watch(ctx, o)
		},
	}, k.cfg.Clients), &corev1.Pod{}, k.cfg.Resync, cache.Indexers{})
	informers := []cache.SharedIndexInformer{podInf}
	var sliceInf cache.SharedIndexInformer
	if k.cfg.Service != "" {
		slices := k.cfg.Clients.DiscoveryV1().EndpointSlices(ns)
		svcSel := discoveryv1.LabelServiceName + "=" + k.cfg.Service
		sliceInf = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = svcSel
				return slices.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = svcSel
				return slices.Watch(ctx, o)
			},
		}, k.cfg.Clients), &discoveryv1.EndpointSlice{}, k.cfg.Resync, cache.Indexers{})
		informers = append(informers, sliceInf)
	}
	wake := make(chan struct{}, 1)
	notify := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}
	for _, inf := range informers {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("discovery: kube informer: %w", err)
		}
		// A failing watch keeps the informer retrying with backoff; the
		// board says so meanwhile (cleared on the next event or resync).
		_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			k.cfg.Board.Raise(DiagUnavailable, "kube", health.Error,
				"Kubernetes API watch failed; keeping the last known workers: "+err.Error())
		})
		go inf.RunWithContext(ctx)
	}
	synced := make([]cache.InformerSynced, len(informers))
	for i, inf := range informers {
		synced[i] = inf.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // ctx ended
	}
	v := newView(fn)
	invalid := map[string]bool{}
	for {
		k.cfg.Board.Clear(DiagUnavailable, "kube", DiagRecovered, "Kubernetes API watch working again")
		v.replace(k.live(podInf, sliceInf, sel, invalid))
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		}
	}
}

// live computes the live set from the informers' caches.
func (k *Kube) live(podInf, sliceInf cache.SharedIndexInformer, sel labels.Selector, invalid map[string]bool) map[string]Record {
	var ready map[string]bool // pod name → ready in some slice
	if sliceInf != nil {
		ready = map[string]bool{}
		for _, o := range sliceInf.GetStore().List() {
			s, ok := o.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			for _, ep := range s.Endpoints {
				if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
					continue
				}
				// Ready nil means unknown, which the API says to read as
				// ready; a terminating endpoint is never ready.
				r := ep.Conditions.Ready == nil || *ep.Conditions.Ready
				if ep.Conditions.Terminating != nil && *ep.Conditions.Terminating {
					r = false
				}
				ready[ep.TargetRef.Name] = ready[ep.TargetRef.Name] || r
			}
		}
	}
	out := map[string]Record{}
	seen := map[string]bool{}
	for _, o := range podInf.GetStore().List() {
		p, ok := o.(*corev1.Pod)
		if !ok || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		val, has := p.Annotations[k.cfg.Annotation]
		if !has {
			continue // not registered (yet, or any more)
		}
		seen[p.Name] = true
		r, err := UnmarshalRecord([]byte(val))
		if err == nil && r.ID != p.Name {
			err = fmt.Errorf("record id %q is not the pod name", r.ID)
		}
		if err != nil {
			invalid[p.Name] = true
			k.cfg.Board.Raise(DiagRecordInvalid, "pod:"+p.Name, health.Warn, "ignoring an invalid discovery record: "+err.Error())
			continue
		}
		if invalid[p.Name] {
			delete(invalid, p.Name)
			k.cfg.Board.Clear(DiagRecordInvalid, "pod:"+p.Name, "", "")
		}
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		if ready != nil {
			if !ready[p.Name] {
				continue
			}
		} else if !podReady(p) {
			continue
		}
		out[r.ID] = r
	}
	for name := range invalid {
		if !seen[name] {
			delete(invalid, name)
			k.cfg.Board.Clear(DiagRecordInvalid, "pod:"+name, "", "")
		}
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Close implements Registry: registrations are revoked.
func (k *Kube) Close() error {
	k.mu.Lock()
	k.closed = true
	ls := make([]*kubeLease, 0, len(k.leases))
	for l := range k.leases {
		ls = append(ls, l)
	}
	k.mu.Unlock()
	var errs []error
	for _, l := range ls {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, l.Revoke(ctx))
		cancel()
	}
	return errors.Join(errs...)
}
