package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/backoff"
	"github.com/tandemllm/tandem/internal/kubeapi"
)

// DefaultAnnotation holds a worker's record on its pod.
const DefaultAnnotation = "tandem.dev/worker-record"

// KubeConfig configures the kube backend.
type KubeConfig struct {
	Common
	// Clients reaches the API server (NewInClusterClients,
	// NewKubeconfigClients or NewClientsForConfig).
	Clients *kubeapi.Client
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
	// Resync recomputes the live set from the caches (default 5 minutes).
	Resync time.Duration
}

// Kube is the Kubernetes backend: workers are pods selected by label, each
// with its record in an annotation it writes on its own pod; readiness
// comes from the Service's EndpointSlices; watchers list and watch both
// (resourceVersion, bookmarks, a re-list on 410 Gone) over the lean
// internal/kubeapi client. The pod's lifetime is the lease: a dead pod
// leaves its EndpointSlices (not ready) at once and the API with its
// deletion.
type Kube struct {
	cfg KubeConfig
	sel kubeapi.Selector

	mu     sync.Mutex
	leases map[*kubeLease]struct{}
	latest *kubeLease // the registration the annotation holds
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
	sel, err := kubeapi.ParseSelector(cfg.Selector)
	if err != nil {
		return nil, fmt.Errorf("discovery: kube selector %q: %w", cfg.Selector, err)
	}
	return &Kube{cfg: cfg, sel: sel, leases: map[*kubeLease]struct{}{}}, nil
}

// NewInClusterClients builds the clients from the pod's service account.
func NewInClusterClients() (*kubeapi.Client, error) {
	rc, err := kubeapi.InClusterConfig()
	if errors.Is(err, kubeapi.ErrNotInCluster) {
		return nil, fmt.Errorf("discovery: kube: not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST is unset): pass --kubeconfig FILE to reach a cluster from outside, or another --discovery (file, etcd, nats): %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("discovery: kube in-cluster config: %w", err)
	}
	return NewClientsForConfig(rc)
}

// NewKubeconfigClients builds the clients from a kubeconfig file (a
// process outside the cluster, or a test against a real API server).
func NewKubeconfigClients(path string) (*kubeapi.Client, error) {
	rc, err := kubeapi.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("discovery: kubeconfig %s: %w", path, err)
	}
	return NewClientsForConfig(rc)
}

// NewClientsForConfig builds the clients from a connection config.
func NewClientsForConfig(rc *kubeapi.Config) (*kubeapi.Client, error) {
	c, err := kubeapi.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("discovery: kube client: %w", err)
	}
	return c, nil
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
	k.latest = l
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
	err = k.cfg.Clients.Do(ctx, kubeapi.Request{Method: http.MethodPatch,
		Path: "/api/v1/namespaces/" + url.PathEscape(k.cfg.Namespace) + "/pods/" + url.PathEscape(k.cfg.PodName),
		Body: patch, ContentType: kubeapi.MergePatch}, nil)
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
// worker before its readiness changes. A lease that a later registration
// of the pod replaced leaves the successor's annotation alone.
func (l *kubeLease) Revoke(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		l.k.mu.Lock()
		delete(l.k.leases, l)
		stale := l.k.latest != l
		l.k.mu.Unlock()
		if !stale {
			err = l.k.annotate(ctx, nil)
		}
	})
	return err
}

// kubeMeta is the part of an object's metadata the backend reads.
type kubeMeta struct {
	Name              string            `json:"name"`
	ResourceVersion   string            `json:"resourceVersion"`
	Labels            map[string]string `json:"labels"`
	Annotations       map[string]string `json:"annotations"`
	DeletionTimestamp *string           `json:"deletionTimestamp"`
}

// kubePod is the part of a core/v1 Pod the backend reads.
type kubePod struct {
	Metadata kubeMeta `json:"metadata"`
	Status   struct {
		Phase      string `json:"phase"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
	} `json:"status"`
}

// kubeSlice is the part of a discovery/v1 EndpointSlice the backend reads.
type kubeSlice struct {
	Metadata  kubeMeta `json:"metadata"`
	Endpoints []struct {
		Conditions struct {
			Ready       *bool `json:"ready"`
			Terminating *bool `json:"terminating"`
		} `json:"conditions"`
		TargetRef *struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"targetRef"`
	} `json:"endpoints"`
}

func (p *kubePod) meta() *kubeMeta   { return &p.Metadata }
func (s *kubeSlice) meta() *kubeMeta { return &s.Metadata }

// kubeObject is what a kubeCache holds.
type kubeObject[T any] interface {
	*T
	meta() *kubeMeta
}

// kubeCache follows one collection as client-go's reflector does: list,
// then watch from the list's resourceVersion (bookmarks keep it fresh),
// watch again when the server ends the stream, list again on 410 Gone, and
// retry failures with backoff, raising discovery_unavailable meanwhile.
type kubeCache[T any, P kubeObject[T]] struct {
	k        *Kube
	path     string
	selector string

	mu    sync.Mutex
	items map[string]P
}

func newKubeCache[T any, P kubeObject[T]](k *Kube, path, selector string) *kubeCache[T, P] {
	return &kubeCache[T, P]{k: k, path: path, selector: selector, items: map[string]P{}}
}

func (c *kubeCache[T, P]) list() []P {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]P, 0, len(c.items))
	for _, it := range c.items {
		out = append(out, it)
	}
	return out
}

// run follows the collection until ctx ends; synced is closed after the
// first complete list, notify called after every change.
func (c *kubeCache[T, P]) run(ctx context.Context, synced chan<- struct{}, notify func()) {
	bo := backoff.Backoff{Base: 800 * time.Millisecond, Max: 30 * time.Second}
	rv := ""
	first := true
	failed := false
	fail := func(err error) {
		failed = true
		c.k.cfg.Board.Raise(DiagUnavailable, "kube", health.Error,
			"Kubernetes API watch failed; keeping the last known workers: "+err.Error())
		backoff.Sleep(ctx, bo.Next())
	}
	for ctx.Err() == nil {
		if rv == "" {
			items := map[string]P{}
			v, err := c.k.cfg.Clients.List(ctx, c.path, c.selector, func(raw json.RawMessage) error {
				var o P = new(T)
				if err := json.Unmarshal(raw, o); err != nil {
					return err
				}
				items[o.meta().Name] = o
				return nil
			})
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				fail(err)
				continue
			}
			c.mu.Lock()
			c.items = items
			c.mu.Unlock()
			rv = v
			if first {
				first = false
				close(synced)
			}
			notify()
		}
		w, err := c.k.cfg.Clients.Watch(ctx, c.path, c.selector, rv)
		if ctx.Err() != nil {
			return
		}
		if kubeapi.IsStatus(err, http.StatusGone) {
			rv = ""
			continue
		}
		if err != nil {
			fail(err)
			continue
		}
		bo.Reset()
		if failed {
			failed = false
			notify() // the board's unavailable clears with the next live set
		}
		err = c.follow(w, &rv, notify)
		_ = w.Close()
		switch {
		case ctx.Err() != nil:
			return
		case kubeapi.IsStatus(err, http.StatusGone):
			rv = ""
		case err != nil:
			fail(err)
		}
	}
}

// follow applies one watch stream's events until it ends (nil at the
// server's timeout).
func (c *kubeCache[T, P]) follow(w *kubeapi.Watcher, rv *string, notify func()) error {
	for {
		e, err := w.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var o P = new(T)
		if err := json.Unmarshal(e.Object, o); err != nil {
			return fmt.Errorf("discovery: kube watch %s: %w", c.path, err)
		}
		m := o.meta()
		if m.ResourceVersion != "" {
			*rv = m.ResourceVersion
		}
		switch e.Type {
		case kubeapi.Added, kubeapi.Modified:
			c.mu.Lock()
			c.items[m.Name] = o
			c.mu.Unlock()
		case kubeapi.Deleted:
			c.mu.Lock()
			delete(c.items, m.Name)
			c.mu.Unlock()
		default: // BOOKMARK: only the version moves
			continue
		}
		notify()
	}
}

// Watch implements Registry by following pods and EndpointSlices; every
// change recomputes the live set from both caches.
func (k *Kube) Watch(ctx context.Context, fn func(Event)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ns := url.PathEscape(k.cfg.Namespace)
	wake := make(chan struct{}, 1)
	notify := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	pods := newKubeCache[kubePod](k, "/api/v1/namespaces/"+ns+"/pods", k.cfg.Selector)
	var slices *kubeCache[kubeSlice, *kubeSlice]
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var syncs []chan struct{}
	start := func(run func(chan<- struct{})) {
		ch := make(chan struct{})
		syncs = append(syncs, ch)
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(ch)
		}()
	}
	start(func(ch chan<- struct{}) { pods.run(ctx, ch, notify) })
	if k.cfg.Service != "" {
		// kubernetes.io/service-name is the label the EndpointSlice
		// controller puts on a Service's slices.
		slices = newKubeCache[kubeSlice](k, "/apis/discovery.k8s.io/v1/namespaces/"+ns+"/endpointslices",
			"kubernetes.io/service-name="+k.cfg.Service)
		start(func(ch chan<- struct{}) { slices.run(ctx, ch, notify) })
	}
	for _, ch := range syncs {
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
	}
	resync := time.NewTicker(k.cfg.Resync)
	defer resync.Stop()
	v := newView(fn)
	invalid := map[string]bool{}
	for {
		k.cfg.Board.Clear(DiagUnavailable, "kube", DiagRecovered, "Kubernetes API watch working again")
		v.replace(k.live(pods, slices, invalid))
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-resync.C:
		}
	}
}

// live computes the live set from the caches.
func (k *Kube) live(pods *kubeCache[kubePod, *kubePod], slices *kubeCache[kubeSlice, *kubeSlice], invalid map[string]bool) map[string]Record {
	var ready map[string]bool // pod name → ready in some slice
	if slices != nil {
		ready = map[string]bool{}
		for _, s := range slices.list() {
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
	for _, p := range pods.list() {
		if !k.sel.Matches(p.Metadata.Labels) {
			continue
		}
		name := p.Metadata.Name
		val, has := p.Metadata.Annotations[k.cfg.Annotation]
		if !has {
			continue // not registered (yet, or any more)
		}
		seen[name] = true
		r, err := UnmarshalRecord([]byte(val))
		if err == nil && r.ID != name {
			err = fmt.Errorf("record id %q is not the pod name", r.ID)
		}
		if err != nil {
			invalid[name] = true
			k.cfg.Board.Raise(DiagRecordInvalid, "pod:"+name, health.Warn, "ignoring an invalid discovery record: "+err.Error())
			continue
		}
		if invalid[name] {
			delete(invalid, name)
			k.cfg.Board.Clear(DiagRecordInvalid, "pod:"+name, "", "")
		}
		if p.Metadata.DeletionTimestamp != nil || p.Status.Phase != "Running" {
			continue
		}
		if ready != nil {
			if !ready[name] {
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

func podReady(p *kubePod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
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
