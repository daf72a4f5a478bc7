package e2e

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/internal/kubetest"
)

const kubeNS = "serving"

// kubeCluster is a real API server with the shipped RBAC
// (deploy/kubernetes/rbac.yaml) and one pod per worker. There is no
// kubelet: the test writes the pods' status as one would, and the workers
// run as local processes under their pods' names, with the worker
// ServiceAccount's identity; the frontend runs as the frontend's.
type kubeCluster struct {
	s                          *kubetest.Server
	admin                      *kubetest.Client
	frontendFlags, workerFlags string
}

func startKubeCluster(t *testing.T, pods []string) *kubeCluster {
	t.Helper()
	const (
		frontendSA = "system:serviceaccount:" + kubeNS + ":tandem-frontend"
		workerSA   = "system:serviceaccount:" + kubeNS + ":tandem-worker"
	)
	groups := "|system:serviceaccounts,system:serviceaccounts:" + kubeNS
	s := kubetest.Start(t, []string{frontendSA + groups, workerSA + groups}, kubeNS)
	s.ApplyIn(t, kubeNS, "../deploy/kubernetes/rbac.yaml")
	admin := s.Client(t)
	dir := t.TempDir()
	feKC, wKC := filepath.Join(dir, "frontend.kubeconfig"), filepath.Join(dir, "worker.kubeconfig")
	s.WriteKubeconfig(t, feKC, frontendSA)
	s.WriteKubeconfig(t, wKC, workerSA)
	kc := &kubeCluster{s: s, admin: admin}
	// --kube-service= : readiness from the pods' Ready condition (no
	// EndpointSlice controller runs here).
	common := " --discovery kube --kube-namespace " + kubeNS + " --kube-service= --kube-selector app.kubernetes.io/component=tandem-worker"
	kc.frontendFlags = "--kubeconfig " + feKC + common
	kc.workerFlags = "--kubeconfig " + wKC + common
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range pods {
		p := kubetest.Object{"apiVersion": "v1", "kind": "Pod",
			"metadata": kubetest.Object{"name": name, "labels": map[string]string{"app.kubernetes.io/name": "tandem", "app.kubernetes.io/component": "tandem-worker"}},
			"spec":     kubetest.Object{"serviceAccountName": "tandem-worker", "containers": []any{kubetest.Object{"name": "worker", "image": "tandem:dev"}}},
		}
		if _, err := admin.Create(ctx, "/api/v1/namespaces/"+kubeNS+"/pods", p); err != nil {
			t.Fatalf("create pod %s: %v", name, err)
		}
		kc.markReady(t, name, true)
	}
	return kc
}

// markReady writes a pod's status as the kubelet does: Running, with the
// Ready condition. (Pod IPs in 127.0.0.0/8 are refused by the API, and
// discovery reads the record's addresses, not the pod IP.)
func (kc *kubeCluster) markReady(t *testing.T, name string, ready bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := "/api/v1/namespaces/" + kubeNS + "/pods/" + name
	p, err := kc.admin.Get(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	st := "False"
	if ready {
		st = "True"
	}
	p["status"] = kubetest.Object{"phase": "Running", "podIP": "10.1.0.1", "podIPs": []any{kubetest.Object{"ip": "10.1.0.1"}},
		"conditions": []any{kubetest.Object{"type": "Ready", "status": st, "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}}}
	if _, err := kc.admin.Update(ctx, path+"/status", p); err != nil {
		t.Fatalf("pod %s status: %v", name, err)
	}
}

// checkNoWorker: with no worker registered, the model is still served and
// a request is a 503 with Retry-After.
func (kc *kubeCluster) checkNoWorker(t *testing.T, url string) {
	t.Helper()
	if m := getBody(t, url+"/v1/models"); !strings.Contains(m, `"tandem-mock"`) {
		t.Fatalf("/v1/models with no worker: %s", m)
	}
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"tandem-mock","prompt":"hi","max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("no worker: status %d, Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
}
