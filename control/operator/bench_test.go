package operator_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tandemllm/tandem/control/operator"
	"github.com/tandemllm/tandem/control/operator/api/v1alpha1"
)

// TestReconcileLatency measures, against the real API server, the time
// from an object change to every child updated: creation (every pool's
// Deployment exists) and a block-size change (every pool's Deployment
// carries the new fingerprint), for 1 and 100 pools. Two operators run on
// one API server, each in its own namespace: one applies a child at a time
// (the baseline), the other DefaultApplyParallel at a time; rounds
// interleave so that both see the same machine. TANDEM_KUBE_BENCH=1 runs
// it (docs/benchmarks/kubernetes.md).
func TestReconcileLatency(t *testing.T) {
	if os.Getenv("TANDEM_KUBE_BENCH") == "" {
		t.Skip("set TANDEM_KUBE_BENCH=1 to measure reconcile latency")
	}
	const serialNS, parallelNS = "serial", "parallel"
	e := startEnv(t, operator.Options{Namespace: serialNS, ApplyParallel: 1}, operator.Options{Namespace: parallelNS})
	c := e.admin
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rounds := 3
	measure := func(namespace, name string, pools int) (create, change time.Duration) {
		ps := make([]v1alpha1.PoolSpec, pools)
		for i := range ps {
			ps[i] = pool(fmt.Sprintf("p%d", i), "aggregated", 1)
		}
		td := object(name, ps...)
		td.Namespace = namespace
		waitAll := func(fp string) {
			for {
				var list appsv1.DeploymentList
				if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{operator.LabelDeployment: name, operator.LabelComponent: "tandem-worker"}); err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, d := range list.Items {
					if d.Spec.Template.Annotations[operator.AnnotationFingerprint] == fp {
						n++
					}
				}
				if n == pools {
					return
				}
				if ctx.Err() != nil {
					t.Fatalf("%s/%s: %d of %d pools updated", namespace, name, n, pools)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		t0 := time.Now()
		if err := c.Create(ctx, td); err != nil {
			t.Fatal(err)
		}
		waitAll(operator.Fingerprint(&td.Spec))
		create = time.Since(t0)
		time.Sleep(time.Second) // the reconciles that creation's child events cause
		if err := c.Get(ctx, client.ObjectKeyFromObject(td), td); err != nil {
			t.Fatal(err)
		}
		td.Spec.KV.BlockSize = 32
		t0 = time.Now()
		if err := c.Update(ctx, td); err != nil {
			t.Fatal(err)
		}
		waitAll(operator.Fingerprint(&td.Spec))
		change = time.Since(t0)
		time.Sleep(time.Second)
		return create, change
	}
	type sums struct{ create, change [2]time.Duration } // [1 pool, 100 pools]
	res := map[string]*sums{serialNS: {}, parallelNS: {}}
	for r := range rounds {
		for _, namespace := range []string{serialNS, parallelNS} {
			for i, pools := range []int{1, 100} {
				a, b := measure(namespace, fmt.Sprintf("p%d-r%d", pools, r), pools)
				res[namespace].create[i] += a
				res[namespace].change[i] += b
				t.Logf("round %d %s: %d pools: create %v, block-size change %v", r, namespace, pools, a.Round(time.Millisecond), b.Round(time.Millisecond))
			}
		}
	}
	n := time.Duration(rounds)
	for _, namespace := range []string{serialNS, parallelNS} {
		s := res[namespace]
		t.Logf("%s, mean of %d: 1 pool: create %v, change %v; 100 pools: create %v, change %v", namespace, rounds,
			(s.create[0] / n).Round(time.Millisecond), (s.change[0] / n).Round(time.Millisecond),
			(s.create[1] / n).Round(time.Millisecond), (s.change[1] / n).Round(time.Millisecond))
	}
	ser, par := res[serialNS], res[parallelNS]
	t.Logf("100 pools, parallel/serial: create %.2f, block-size change %.2f", float64(par.create[1])/float64(ser.create[1]), float64(par.change[1])/float64(ser.change[1]))
}
