package operator_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tandemllm/tandem/control/operator"
	"github.com/tandemllm/tandem/control/operator/api/v1alpha1"
	"github.com/tandemllm/tandem/control/operator/internal/optest"
	"github.com/tandemllm/tandem/internal/kubetest"
)

// helmVersion is the Helm that scripts/helm-check.sh installs.
const helmVersion = "v3.22.0"

// helmBinary is $TANDEM_HELM or scripts/helm-check.sh's cached install.
func helmBinary(t *testing.T) string {
	if p := os.Getenv("TANDEM_HELM"); p != "" {
		return p
	}
	home, _ := os.UserHomeDir()
	p := filepath.Join(home, ".cache", "tandem", "bin", "helm-"+helmVersion+".d", "helm")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no helm at %s (scripts/helm-check.sh installs it): %v", p, err)
	}
	return p
}

// TestHelmInstall installs the chart with helm on the real API server and
// checks what it created (the CRD, Established; the ClusterRole and its
// binding; the ServiceAccount; the operator's Deployment under that
// ServiceAccount), then runs the operator as that ServiceAccount, with
// only the chart's RBAC, and has it reconcile an object.
func TestHelmInstall(t *testing.T) {
	helm := helmBinary(t)
	const (
		release = "tandem"
		sysNS   = "tandem-system"
		saUser  = "system:serviceaccount:" + sysNS + ":tandem-operator"
	)
	s := kubetest.Start(t, []string{saUser + "|system:serviceaccounts,system:serviceaccounts:" + sysNS}, ns)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, "install", release, "../../deploy/helm/tandem-operator",
		"--namespace", sysNS, "--create-namespace", "--kubeconfig", s.Kubeconfig, "--set", "leaderElect=false", "--timeout", "2m")
	// Helm's own state stays in the test's directory.
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(dir, "cache"), "HELM_CONFIG_HOME="+filepath.Join(dir, "config"),
		"HELM_DATA_HOME="+filepath.Join(dir, "data"), "KUBECONFIG=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	s.WaitEstablished(t, "tandemdeployments.tandem.dev")
	sch, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(optest.Config(s), client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	var cr rbacv1.ClusterRole
	var crb rbacv1.ClusterRoleBinding
	var sa corev1.ServiceAccount
	var dep appsv1.Deployment
	for _, o := range []struct {
		key types.NamespacedName
		obj client.Object
	}{
		{types.NamespacedName{Name: "tandem-operator"}, &cr},
		{types.NamespacedName{Name: "tandem-operator"}, &crb},
		{types.NamespacedName{Namespace: sysNS, Name: "tandem-operator"}, &sa},
		{types.NamespacedName{Namespace: sysNS, Name: "tandem-operator"}, &dep},
	} {
		if err := admin.Get(ctx, o.key, o.obj); err != nil {
			t.Fatalf("%T %s after helm install: %v", o.obj, o.key, err)
		}
	}
	if dep.Spec.Template.Spec.ServiceAccountName != "tandem-operator" || crb.RoleRef.Name != cr.Name ||
		len(crb.Subjects) != 1 || crb.Subjects[0].Namespace != sysNS || crb.Subjects[0].Name != sa.Name {
		t.Fatalf("the chart's Deployment (sa %q) and binding (%+v) do not match", dep.Spec.Template.Spec.ServiceAccountName, crb)
	}

	// The operator as the chart's ServiceAccount: nothing but the chart's
	// RBAC lets it work.
	octx, ocancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- operator.Run(octx, operator.Options{Config: optest.ConfigFor(s, saUser), MetricsAddr: "0", ProbeAddr: "0", Logger: testLogger(),
			HealthURL: func(*v1alpha1.TandemDeployment) string { return "" }})
	}()
	defer func() {
		ocancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	}()
	td := object("helm", pool("prefill", "prefill", 1), pool("decode", "decode", 1))
	if err := admin.Create(ctx, td); err != nil {
		t.Fatal(err)
	}
	for _, ch := range childrenOf("helm") {
		eventually(t, 60*time.Second, fmt.Sprintf("%T %s", ch, ch.GetName()), func() error {
			return admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: ch.GetName()}, ch)
		})
	}
}
