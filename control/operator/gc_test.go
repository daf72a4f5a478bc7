package operator_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tandemllm/tandem/control/operator"
	"github.com/tandemllm/tandem/control/operator/api/v1alpha1"
	"github.com/tandemllm/tandem/health"
)

// childrenOf lists the children the operator renders for an object named
// name with the pools "prefill" and "decode".
func childrenOf(name string) []client.Object {
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name + "-discovery"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-discovery"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-config"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name + "-frontend"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name + "-frontend"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name + "-workers"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name + "-prefill"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name + "-decode"}},
	}
}

// TestDeletionGarbageCollects deletes a TandemDeployment on a real control
// plane (kube-apiserver and kube-controller-manager's garbage collector):
// every child goes with it, by its owner reference alone (the operator
// deletes nothing itself), and a foreground deletion waits for them.
func TestDeletionGarbageCollects(t *testing.T) {
	e := startEnv(t)
	// After the CRD: the collector discovers resources at start.
	e.s.StartControllerManager(t, "garbagecollector")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := e.admin
	for _, tc := range []struct {
		name   string
		policy metav1.DeletionPropagation
	}{{"gc-background", metav1.DeletePropagationBackground}, {"gc-foreground", metav1.DeletePropagationForeground}} {
		td := object(tc.name, pool("prefill", "prefill", 1), pool("decode", "decode", 2))
		if err := c.Create(ctx, td); err != nil {
			t.Fatal(err)
		}
		children := childrenOf(tc.name)
		for _, ch := range children {
			eventually(t, 30*time.Second, fmt.Sprintf("%s: %T %s", tc.name, ch, ch.GetName()), func() error {
				return c.Get(ctx, types.NamespacedName{Namespace: ns, Name: ch.GetName()}, ch)
			})
		}
		start := time.Now()
		if err := c.Delete(ctx, td, client.PropagationPolicy(tc.policy)); err != nil {
			t.Fatal(err)
		}
		for _, ch := range children {
			eventually(t, 60*time.Second, fmt.Sprintf("%s: %T %s collected", tc.name, ch, ch.GetName()), func() error {
				err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: ch.GetName()}, ch)
				if apierrors.IsNotFound(err) {
					return nil
				}
				return fmt.Errorf("still there (deletion %v): %v", ch.GetDeletionTimestamp(), err)
			})
		}
		eventually(t, 60*time.Second, tc.name+" gone", func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(td), &v1alpha1.TandemDeployment{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("object still there: %v", err)
			}
			return nil
		})
		t.Logf("%s: %d children collected %v after the delete", tc.policy, len(children), time.Since(start).Round(time.Millisecond))
	}
}

// TestReconcileFailureDiagnostic: a child the operator cannot apply (a
// ConfigMap of its name already controlled by someone else, which the API
// server refuses to give a second controller) raises
// operator_reconcile_failed and Degraded; removing the squatter clears
// both.
func TestReconcileFailureDiagnostic(t *testing.T) {
	board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
	e := startEnv(t, operator.Options{Board: board})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := e.admin
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "squatter-owner", Namespace: ns}}
	if err := c.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	yes := true
	squat := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bad-config", Namespace: ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: &yes}}}}
	if err := c.Create(ctx, squat); err != nil {
		t.Fatal(err)
	}
	td := object("bad", pool("agg", "aggregated", 1))
	if err := c.Create(ctx, td); err != nil {
		t.Fatal(err)
	}
	key := ns + "/bad"
	eventually(t, 30*time.Second, "operator_reconcile_failed raised", func() error {
		if !board.IsActive(operator.DiagReconcileFailed, key) {
			return fmt.Errorf("diagnostics %+v", board.Active())
		}
		var o v1alpha1.TandemDeployment
		if err := c.Get(ctx, client.ObjectKeyFromObject(td), &o); err != nil {
			return err
		}
		if condition(&o, v1alpha1.ConditionDegraded) != metav1.ConditionTrue {
			return fmt.Errorf("conditions %+v", o.Status.Conditions)
		}
		return nil
	})
	for _, d := range board.Active() {
		if d.Code == operator.DiagReconcileFailed && !strings.Contains(d.Message, "bad-config") {
			t.Errorf("the message does not name the child: %s", d.Message)
		}
	}
	if err := c.Delete(ctx, squat); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "operator_reconcile_failed cleared", func() error {
		if board.IsActive(operator.DiagReconcileFailed, key) {
			return fmt.Errorf("still active")
		}
		return nil
	})
}
