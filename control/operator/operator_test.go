package operator_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tandemllm/tandem/control/operator"
	"github.com/tandemllm/tandem/control/operator/api/v1alpha1"
	"github.com/tandemllm/tandem/control/operator/internal/optest"
	"github.com/tandemllm/tandem/internal/kubetest"
)

const (
	operatorUser = "system:serviceaccount:tandem-system:tandem-operator"
	ns           = "serving"
)

// env is a real API server with the CRD and the operator's RBAC installed,
// and the operator running as its ServiceAccount.
type env struct {
	s      *kubetest.Server
	admin  client.Client
	health atomic.Value // the frontend /health body
}

// startEnv starts the API server and one operator per entry of ops (one
// for every namespace when ops is empty).
func startEnv(t *testing.T, ops ...operator.Options) *env {
	t.Helper()
	namespaces := []string{ns}
	for _, o := range ops {
		if o.Namespace != "" {
			namespaces = append(namespaces, o.Namespace)
		}
	}
	s := kubetest.Start(t, []string{operatorUser + "|system:serviceaccounts,system:serviceaccounts:tandem-system"}, namespaces...)
	s.InstallCRDs(t, "../../deploy/crd/tandem.dev_tandemdeployments.yaml")
	// The shipped manifests, as an installer would apply them; the
	// Deployment never runs (no kubelet), the operator runs in-process
	// under the same identity.
	s.Apply(t, "../../deploy/operator/role.yaml", "../../deploy/operator/rbac.yaml", "../../deploy/operator/deployment.yaml")
	sch, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(optest.Config(s), client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{s: s, admin: admin}
	e.health.Store(`{"status":"ok","diagnostics":[]}`)
	// The frontend's /health, as frontend.healthReport encodes it.
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, e.health.Load().(string))
	}))
	t.Cleanup(hs.Close)
	if len(ops) == 0 {
		ops = []operator.Options{{}}
	}
	for _, o := range ops {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		o.Config, o.MetricsAddr, o.ProbeAddr, o.Logger = optest.ConfigFor(s, operatorUser), "0", "0", testLogger()
		o.HealthURL = func(*v1alpha1.TandemDeployment) string { return hs.URL + "/health" }
		go func() { done <- operator.Run(ctx, o) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("operator: %v", err)
			}
		})
	}
	return e
}

func eventually(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func object(name string, pools ...v1alpha1.PoolSpec) *v1alpha1.TandemDeployment {
	return &v1alpha1.TandemDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.TandemDeploymentSpec{
			Model: v1alpha1.ModelSpec{Name: "tandem-mock"},
			KV:    v1alpha1.KVSpec{BlockSize: 16},
			Pools: pools,
		},
	}
}

func pool(name, role string, replicas int32) v1alpha1.PoolSpec {
	return v1alpha1.PoolSpec{Name: name, Role: role, Replicas: replicas, Engine: v1alpha1.EngineSpec{Kind: "mocker"}}
}

func hasArg(c corev1.Container, arg string) bool { return slices.Contains(c.Args, arg) }

// playDeploymentController writes each Deployment's status as the
// Deployment controller would once every replica is up (there is no
// kube-controller-manager in the test).
func playDeploymentController(ctx context.Context, c client.Client, name string) error {
	var list appsv1.DeploymentList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{operator.LabelDeployment: name}); err != nil {
		return err
	}
	for i := range list.Items {
		d := &list.Items[i]
		r := *d.Spec.Replicas
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: r, UpdatedReplicas: r, ReadyReplicas: r, AvailableReplicas: r}
		if err := c.Status().Update(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

func condition(td *v1alpha1.TandemDeployment, typ string) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(td.Status.Conditions, typ); c != nil && c.ObservedGeneration == td.Generation {
		return c.Status
	}
	return "unknown"
}

// TestOperator drives the operator through an object's life against the
// real API server: every child created with an owner reference, status,
// a block-size change reaching every pool, a replicas patch, a pool
// removed, a degraded frontend, and RBAC refusing a stranger.
func TestOperator(t *testing.T) {
	e := startEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := e.admin
	td := object("qwen", pool("prefill", "prefill", 1), pool("decode", "decode", 2))
	if err := c.Create(ctx, td); err != nil {
		t.Fatal(err)
	}

	// Every child, owned by the object.
	children := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "qwen"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "qwen-discovery"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "qwen-discovery"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "qwen-config"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "qwen-frontend"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "qwen-frontend"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "qwen-workers"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "qwen-prefill"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "qwen-decode"}},
	}
	for _, ch := range children {
		eventually(t, 30*time.Second, fmt.Sprintf("%T %s", ch, ch.GetName()), func() error {
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: ch.GetName()}, ch); err != nil {
				return err
			}
			refs := ch.GetOwnerReferences()
			if len(refs) != 1 || refs[0].UID != td.UID || refs[0].Kind != "TandemDeployment" ||
				refs[0].Controller == nil || !*refs[0].Controller || refs[0].BlockOwnerDeletion == nil || !*refs[0].BlockOwnerDeletion {
				return fmt.Errorf("owner references %+v", refs)
			}
			return nil
		})
	}
	fp := operator.Fingerprint(&td.Spec)
	for _, name := range []string{"qwen-prefill", "qwen-decode"} {
		var d appsv1.Deployment
		_ = c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &d)
		w := d.Spec.Template.Spec.Containers[0]
		if d.Spec.Template.Annotations[operator.AnnotationFingerprint] != fp || !hasArg(w, "--block-size=16") || !hasArg(w, "--kv-config-fingerprint="+fp) {
			t.Fatalf("%s: fingerprint %q args %v, want %s and --block-size=16", name, d.Spec.Template.Annotations[operator.AnnotationFingerprint], w.Args, fp)
		}
	}

	// Status before any replica is up: not ready, progressing.
	get := func() *v1alpha1.TandemDeployment {
		var o v1alpha1.TandemDeployment
		if err := c.Get(ctx, client.ObjectKeyFromObject(td), &o); err != nil {
			t.Fatal(err)
		}
		return &o
	}
	// update changes the spec of the latest version; the operator's
	// status writes race with it, so a conflict is retried.
	update := func(f func(*v1alpha1.TandemDeployment)) *v1alpha1.TandemDeployment {
		var o *v1alpha1.TandemDeployment
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			o = get()
			f(o)
			return c.Update(ctx, o)
		}); err != nil {
			t.Fatal(err)
		}
		return o
	}
	eventually(t, 30*time.Second, "status: progressing", func() error {
		o := get()
		if condition(o, v1alpha1.ConditionReady) != metav1.ConditionFalse || condition(o, v1alpha1.ConditionProgressing) != metav1.ConditionTrue || o.Status.KVFingerprint != fp {
			return fmt.Errorf("status %+v", o.Status)
		}
		return nil
	})
	// Every replica up: ready, rolled out, per-pool counts.
	if err := playDeploymentController(ctx, c, "qwen"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "status: ready", func() error {
		o := get()
		if condition(o, v1alpha1.ConditionReady) != metav1.ConditionTrue || condition(o, v1alpha1.ConditionProgressing) != metav1.ConditionFalse ||
			condition(o, v1alpha1.ConditionDegraded) != metav1.ConditionFalse {
			return fmt.Errorf("conditions %+v", o.Status.Conditions)
		}
		if len(o.Status.Pools) != 2 || o.Status.Pools[1].Name != "decode" || o.Status.Pools[1].ReadyReplicas != 2 || o.Status.Frontend.ReadyReplicas != 1 || o.Status.Frontend.Health != "ok" {
			return fmt.Errorf("pools %+v frontend %+v", o.Status.Pools, o.Status.Frontend)
		}
		return nil
	})

	// The frontend reports a diagnostic: Degraded, with the code.
	e.health.Store(`{"status":"degraded","diagnostics":[{"code":"kv_events_missing","severity":"error","subject":"w1","message":"x"}]}`)
	if err := c.Patch(ctx, get(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"poke":"1"}}}`))); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "status: degraded", func() error {
		o := get()
		if condition(o, v1alpha1.ConditionDegraded) != metav1.ConditionTrue || !slices.Equal(o.Status.Frontend.Diagnostics, []string{"kv_events_missing"}) {
			return fmt.Errorf("conditions %+v frontend %+v", o.Status.Conditions, o.Status.Frontend)
		}
		return nil
	})
	e.health.Store(`{"status":"ok","diagnostics":[]}`)

	// A block-size change reaches every pool and the frontend.
	o := update(func(o *v1alpha1.TandemDeployment) { o.Spec.KV.BlockSize = 32 })
	fp32 := operator.Fingerprint(&o.Spec)
	eventually(t, 30*time.Second, "block size 32 in every child", func() error {
		for _, name := range []string{"qwen-prefill", "qwen-decode"} {
			var d appsv1.Deployment
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &d); err != nil {
				return err
			}
			if w := d.Spec.Template.Spec.Containers[0]; !hasArg(w, "--block-size=32") || d.Spec.Template.Annotations[operator.AnnotationFingerprint] != fp32 {
				return fmt.Errorf("%s args %v", name, w.Args)
			}
		}
		var f appsv1.Deployment
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "qwen-frontend"}, &f); err != nil {
			return err
		}
		if !hasArg(f.Spec.Template.Spec.Containers[0], "--router-block-size=32") {
			return fmt.Errorf("frontend args %v", f.Spec.Template.Spec.Containers[0].Args)
		}
		var cm corev1.ConfigMap
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "qwen-config"}, &cm); err != nil {
			return err
		}
		if cm.Data["kv-fingerprint"] != fp32 {
			return fmt.Errorf("configmap fingerprint %q", cm.Data["kv-fingerprint"])
		}
		return nil
	})
	eventually(t, 30*time.Second, "status: new fingerprint, progressing", func() error {
		o := get()
		if o.Status.KVFingerprint != fp32 || condition(o, v1alpha1.ConditionProgressing) != metav1.ConditionTrue {
			return fmt.Errorf("status %+v", o.Status)
		}
		return nil
	})

	// A planner's scale: a JSON patch of one pool's replicas, guarded by
	// a test of the pool's name (docs/kubernetes.md).
	patch := `[{"op":"test","path":"/spec/pools/1/name","value":"decode"},{"op":"replace","path":"/spec/pools/1/replicas","value":5}]`
	if err := c.Patch(ctx, get(), client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "decode scaled to 5", func() error {
		var d appsv1.Deployment
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "qwen-decode"}, &d); err != nil {
			return err
		}
		if *d.Spec.Replicas != 5 {
			return fmt.Errorf("replicas %d", *d.Spec.Replicas)
		}
		return nil
	})
	// A stale patch (pool 1 is not "prefill") is refused, nothing changes.
	stale := `[{"op":"test","path":"/spec/pools/1/name","value":"prefill"},{"op":"replace","path":"/spec/pools/1/replicas","value":0}]`
	if err := c.Patch(ctx, get(), client.RawPatch(types.JSONPatchType, []byte(stale))); err == nil {
		t.Fatal("a patch whose test op fails was applied")
	}
	// Scale to zero and back is a spec change like any other; replicas < 0
	// is refused by the schema.
	neg := `[{"op":"replace","path":"/spec/pools/1/replicas","value":-1}]`
	if err := c.Patch(ctx, get(), client.RawPatch(types.JSONPatchType, []byte(neg))); err == nil || !strings.Contains(err.Error(), "spec.pools[1].replicas") {
		t.Fatalf("negative replicas: %v", err)
	}

	// A pool removed from the spec: its Deployment goes.
	update(func(o *v1alpha1.TandemDeployment) {
		o.Spec.Pools = o.Spec.Pools[1:]
		o.Spec.Disaggregation.Mode = "never"
	})
	eventually(t, 30*time.Second, "prefill pool deleted", func() error {
		var d appsv1.Deployment
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "qwen-prefill"}, &d)
		if apierrors.IsNotFound(err) || (err == nil && d.DeletionTimestamp != nil) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})

	// A hand edit of a child is put back.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var dd appsv1.Deployment
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "qwen-decode"}, &dd); err != nil {
			return err
		}
		dd.Spec.Template.Spec.Containers[0].Args = []string{"worker"}
		return c.Update(ctx, &dd)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "hand edit reverted", func() error {
		var d appsv1.Deployment
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "qwen-decode"}, &d); err != nil {
			return err
		}
		if !hasArg(d.Spec.Template.Spec.Containers[0], "--block-size=32") {
			return fmt.Errorf("args %v", d.Spec.Template.Spec.Containers[0].Args)
		}
		return nil
	})

	// RBAC: a stranger may not read the objects; the operator's own
	// identity may not read Secrets (it never needs them).
	sch, _ := operator.Scheme()
	stranger, _ := client.New(optest.ConfigFor(e.s, kubetest.StrangerUser), client.Options{Scheme: sch})
	if err := stranger.List(ctx, &v1alpha1.TandemDeploymentList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
		t.Fatalf("stranger listed TandemDeployments: %v", err)
	}
	opc, _ := client.New(optest.ConfigFor(e.s, operatorUser), client.Options{Scheme: sch})
	if err := opc.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
		t.Fatalf("operator listed Secrets: %v", err)
	}
}

// testLogger discards the operator's log unless TANDEM_OPERATOR_LOG=1.
func testLogger() *slog.Logger {
	if os.Getenv("TANDEM_OPERATOR_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
