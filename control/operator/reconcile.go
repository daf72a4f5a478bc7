package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/tandemllm/tandem/control/operator/api/v1alpha1"
	"github.com/tandemllm/tandem/health"
)

// FieldOwner is the operator's server-side apply field manager.
const FieldOwner = "tandem-operator"

// +kubebuilder:rbac:groups=tandem.dev,resources=tandemdeployments,verbs=get;list;watch
// +kubebuilder:rbac:groups=tandem.dev,resources=tandemdeployments/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconciler reconciles TandemDeployments. The markers above generate the
// operator's ClusterRole (deploy/operator/role.yaml, scripts/gen-crd.sh):
// what it writes, plus what the Roles it creates grant (RBAC lets no one
// grant what it does not hold), plus leader election's Lease and Events.
type Reconciler struct {
	Client client.Client
	Scheme *runtime.Scheme
	// HealthURL is where the frontend's /health is read (default: its
	// Service's cluster DNS name). Empty result: not polled.
	HealthURL func(td *v1alpha1.TandemDeployment) string
	// HTTP reads /health (default: a client with a 2 s timeout).
	HTTP *http.Client
	// HealthEvery re-reads /health while nothing else changes (default
	// 30 s).
	HealthEvery time.Duration
	// Name is the controller's name, unique in the process (default
	// "tandemdeployment").
	Name string
	// ApplyParallel bounds the apply calls in flight per object (default
	// DefaultApplyParallel; 1: one at a time).
	ApplyParallel int
	// Board receives operator_reconcile_failed (nil: none).
	Board *health.Board
}

// DefaultHealthURL is the frontend Service's /health inside the cluster.
func DefaultHealthURL(td *v1alpha1.TandemDeployment) string {
	return fmt.Sprintf("http://%s.%s.svc:%d/health", FrontendName(td), td.Namespace, FrontendPort)
}

// SetupWithManager registers the controller: it watches the objects and
// every kind of child it owns, so a child's change (a Deployment's ready
// replicas, a hand edit) reconciles its owner.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.HealthURL == nil {
		r.HealthURL = DefaultHealthURL
	}
	if r.HTTP == nil {
		r.HTTP = &http.Client{Timeout: 2 * time.Second}
	}
	if r.HealthEvery <= 0 {
		r.HealthEvery = 30 * time.Second
	}
	if r.ApplyParallel <= 0 {
		r.ApplyParallel = DefaultApplyParallel
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(def(r.Name, "tandemdeployment")).
		// Objects reconcile in parallel (one object never does twice at
		// once): with one worker, a 100-pool object's reconcile held a
		// 1-pool object's first reconcile back by a second.
		// SkipNameValidation: the name check guards against two
		// controllers sharing metrics in one process, which happens only
		// when a process (a test) runs the operator more than once.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: ptr(true)}).
		For(&v1alpha1.TandemDeployment{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Complete(r)
}

// Reconcile applies every child with server-side apply (a no-op write when
// nothing changed), deletes pools that left the spec, and writes status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	key := req.NamespacedName.String()
	var td v1alpha1.TandemDeployment
	if err := r.Client.Get(ctx, req.NamespacedName, &td); err != nil {
		if apierrors.IsNotFound(err) {
			r.reportReconcile(key, nil) // gone: nothing left to fail
			return ctrl.Result{}, nil
		}
		r.reportReconcile(key, err)
		return ctrl.Result{}, err
	}
	if td.DeletionTimestamp != nil {
		r.reportReconcile(key, nil)
		return ctrl.Result{}, nil // the garbage collector deletes the children
	}
	defer func() { r.reportReconcile(key, err) }()
	start := time.Now()
	defer func() {
		ctrl.LoggerFrom(ctx).V(1).Info("reconciled", "generation", td.Generation, "pools", len(td.Spec.Pools), "took", time.Since(start).String())
	}()
	applyErr := r.applyChildren(ctx, &td)
	if applyErr == nil {
		applyErr = r.prunePools(ctx, &td)
	}
	if err := r.writeStatus(ctx, &td, applyErr); err != nil {
		return ctrl.Result{}, err
	}
	if applyErr != nil {
		return ctrl.Result{}, applyErr
	}
	return ctrl.Result{RequeueAfter: r.HealthEvery}, nil
}

// DefaultApplyParallel bounds the server-side apply calls in flight for
// one object (Reconciler.ApplyParallel); docs/benchmarks/kubernetes.md
// compares it with one call at a time.
const DefaultApplyParallel = 8

func (r *Reconciler) applyChildren(ctx context.Context, td *v1alpha1.TandemDeployment) error {
	objs := Children(td)
	for _, obj := range objs {
		gvk, err := apiutil.GVKForObject(obj, r.Scheme)
		if err != nil {
			return fmt.Errorf("operator: %T: %w", obj, err)
		}
		obj.GetObjectKind().SetGroupVersionKind(gvk)
		if err := controllerutil.SetControllerReference(td, obj, r.Scheme); err != nil {
			return fmt.Errorf("operator: owner reference on %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
	}
	// Server-side apply: the operator owns exactly the fields it renders,
	// puts back hand edits of them, and leaves fields other managers set
	// alone. A no-op apply writes nothing.
	apply := func(ctx context.Context, obj client.Object) error {
		if err := r.Client.Patch(ctx, obj, client.Apply, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil { //nolint:staticcheck // typed SSA keeps the renderer one set of structs
			return fmt.Errorf("operator: apply %s %s/%s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetNamespace(), obj.GetName(), err)
		}
		return nil
	}
	// RBAC first, in order: the API server lets the operator bind a Role
	// only once the Role exists (its escalation check compares the
	// Role's rules with the operator's own), so a RoleBinding applied
	// alongside its Role is refused with "not found".
	n := 0
	for ; n < len(objs); n++ {
		switch objs[n].(type) {
		case *corev1.ServiceAccount, *rbacv1.Role, *rbacv1.RoleBinding:
			if err := apply(ctx, objs[n]); err != nil {
				return err
			}
			continue
		}
		break
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.ApplyParallel)
	for _, obj := range objs[n:] {
		g.Go(func() error { return apply(gctx, obj) })
	}
	return g.Wait()
}

// prunePools deletes the Deployments of pools no longer in the spec.
func (r *Reconciler) prunePools(ctx context.Context, td *v1alpha1.TandemDeployment) error {
	var list appsv1.DeploymentList
	if err := r.Client.List(ctx, &list, client.InNamespace(td.Namespace), client.MatchingLabels{LabelDeployment: td.Name, LabelComponent: "tandem-worker"}); err != nil {
		return fmt.Errorf("operator: list pools: %w", err)
	}
	for i := range list.Items {
		d := &list.Items[i]
		if !metav1.IsControlledBy(d, td) {
			continue
		}
		pool := d.Labels[LabelPool]
		if slices.ContainsFunc(td.Spec.Pools, func(p v1alpha1.PoolSpec) bool { return p.Name == pool }) {
			continue
		}
		if err := r.Client.Delete(ctx, d, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("operator: delete pool %s: %w", d.Name, err)
		}
	}
	return nil
}

// frontendHealth is the part of the frontend's /health body the status
// shows (frontend.healthReport).
type frontendHealth struct {
	Status      string `json:"status"`
	Diagnostics []struct {
		Code string `json:"code"`
	} `json:"diagnostics"`
}

func (r *Reconciler) readHealth(ctx context.Context, td *v1alpha1.TandemDeployment) (string, []string, error) {
	url := r.HealthURL(td)
	if url == "" {
		return "", nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", nil, err
	}
	resp, err := r.HTTP.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	var h frontendHealth
	// /health is a small document; 1 MiB bounds a misbehaving server.
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&h); err != nil {
		return "", nil, fmt.Errorf("frontend /health (HTTP %d): %w", resp.StatusCode, err)
	}
	codes := make([]string, 0, len(h.Diagnostics))
	for _, d := range h.Diagnostics {
		if !slices.Contains(codes, d.Code) {
			codes = append(codes, d.Code)
		}
	}
	slices.Sort(codes)
	return h.Status, codes, nil
}

func (r *Reconciler) writeStatus(ctx context.Context, td *v1alpha1.TandemDeployment, applyErr error) error {
	st := v1alpha1.TandemDeploymentStatus{
		ObservedGeneration: td.Generation,
		KVFingerprint:      Fingerprint(&td.Spec),
		Conditions:         slices.Clone(td.Status.Conditions),
	}
	progressing, ready := []string{}, true
	for _, p := range td.Spec.Pools {
		ps := v1alpha1.PoolStatus{Name: p.Name}
		var d appsv1.Deployment
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: td.Namespace, Name: PoolDeploymentName(td, p.Name)}, &d)
		if err == nil {
			ps.Replicas, ps.ReadyReplicas = d.Status.Replicas, d.Status.ReadyReplicas
			if !deploymentDone(&d, p.Replicas) {
				progressing = append(progressing, p.Name)
			}
		} else {
			progressing = append(progressing, p.Name)
		}
		if ps.ReadyReplicas < p.Replicas {
			ready = false
		}
		st.Pools = append(st.Pools, ps)
	}
	var fd appsv1.Deployment
	want := int32(1)
	if td.Spec.Frontend.Replicas != nil {
		want = *td.Spec.Frontend.Replicas
	}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: td.Namespace, Name: FrontendName(td)}, &fd); err == nil {
		st.Frontend.ReadyReplicas = fd.Status.ReadyReplicas
		if !deploymentDone(&fd, want) {
			progressing = append(progressing, "frontend")
		}
	} else {
		progressing = append(progressing, "frontend")
	}
	if st.Frontend.ReadyReplicas < 1 {
		ready = false
	}
	var healthErr error
	if st.Frontend.ReadyReplicas > 0 {
		st.Frontend.Health, st.Frontend.Diagnostics, healthErr = r.readHealth(ctx, td)
		if healthErr != nil {
			st.Frontend.Health = "unreachable"
		}
	}
	gen := td.Generation
	set := func(typ string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	switch {
	case applyErr != nil:
		set(v1alpha1.ConditionDegraded, true, "ApplyFailed", applyErr.Error())
	case healthErr != nil:
		set(v1alpha1.ConditionDegraded, true, "FrontendUnreachable", healthErr.Error())
	case st.Frontend.Health != "" && st.Frontend.Health != "ok":
		set(v1alpha1.ConditionDegraded, true, "FrontendDiagnostics", fmt.Sprintf("frontend /health is %s: %v", st.Frontend.Health, st.Frontend.Diagnostics))
	default:
		set(v1alpha1.ConditionDegraded, false, "AsExpected", "")
	}
	if len(progressing) > 0 {
		set(v1alpha1.ConditionProgressing, true, "RollingOut", fmt.Sprintf("not yet rolled out: %v", progressing))
	} else {
		set(v1alpha1.ConditionProgressing, false, "RolledOut", "every child is at the desired generation and size")
	}
	if ready {
		set(v1alpha1.ConditionReady, true, "Ready", "the frontend and every pool are ready")
	} else {
		set(v1alpha1.ConditionReady, false, "NotReady", "the frontend or a pool has fewer ready replicas than desired")
	}
	if statusEqual(&td.Status, &st) {
		return nil
	}
	td.Status = st
	if err := r.Client.Status().Update(ctx, td); err != nil {
		if apierrors.IsConflict(err) {
			return nil // a newer generation is queued already
		}
		return fmt.Errorf("operator: status: %w", err)
	}
	return nil
}

// deploymentDone: the Deployment controller has seen the latest template
// and every replica is updated and available.
func deploymentDone(d *appsv1.Deployment, want int32) bool {
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
		d.Status.Replicas == want && d.Status.AvailableReplicas == want
}

func statusEqual(a, b *v1alpha1.TandemDeploymentStatus) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
