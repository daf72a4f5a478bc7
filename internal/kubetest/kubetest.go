package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/internal/etcdtest"
	"github.com/tandemllm/tandem/internal/kubeapi"
	"github.com/tandemllm/tandem/internal/sharedfiles"
)

// Version is the kube-apiserver version the tests run against; it must
// match scripts/build-kube-apiserver.sh's default.
const Version = "v1.37.2"

// Identities in the token file. Admin is in system:masters (every
// permission, bypassing RBAC); Stranger is authenticated but bound to
// nothing, so every request it makes past discovery is forbidden.
const (
	AdminUser    = "tandem-test-admin"
	StrangerUser = "tandem-test-stranger"
)

// Binary returns the kube-apiserver path: $TANDEM_KUBE_APISERVER, or the
// cached build at ~/.cache/tandem/bin/kube-apiserver-<Version>.
func Binary() (string, error) { return component("kube-apiserver", "TANDEM_KUBE_APISERVER") }

// ControllerManagerBinary returns the kube-controller-manager path:
// $TANDEM_KUBE_CONTROLLER_MANAGER, or the cached build at
// ~/.cache/tandem/bin/kube-controller-manager-<Version>.
func ControllerManagerBinary() (string, error) {
	return component("kube-controller-manager", "TANDEM_KUBE_CONTROLLER_MANAGER")
}

// component finds a binary built by scripts/build-kube.sh.
func component(name, env string) (string, error) {
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %w", env, err)
		}
		return p, nil
	}
	p := filepath.Join(sharedfiles.CacheDir(), "bin", name+"-"+Version)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no %s at %s (build it with scripts/build-kube.sh %s): %w", name, p, name, err)
	}
	return p, nil
}

// Server is one running kube-apiserver.
type Server struct {
	// URL is the https endpoint.
	URL string
	// Kubeconfig is a kubeconfig file for the admin identity, for
	// processes the test starts (KUBECONFIG=...).
	Kubeconfig string
	// tokens by user.
	tokens map[string]string
	caData []byte
}

// APIConfig is the admin identity's config for the internal/kubeapi
// client.
func (s *Server) APIConfig() *kubeapi.Config { return s.APIConfigFor(AdminUser) }

// APIConfigFor is APIConfig for a user of the token file (AdminUser,
// StrangerUser, or one passed to Start's extra users).
func (s *Server) APIConfigFor(user string) *kubeapi.Config {
	return &kubeapi.Config{Host: s.URL, BearerToken: s.tokens[user], CAData: s.caData, Timeout: 30 * time.Second}
}

// Token returns a user's bearer token.
func (s *Server) Token(user string) string { return s.tokens[user] }

// CA returns the PEM of the serving certificate, which a client must
// trust (the operator module builds its client-go config from URL, Token
// and CA).
func (s *Server) CA() []byte { return s.caData }

// Start runs kube-apiserver for the test (skipping it when the binary is
// absent) and stops it at cleanup. users are extra identities for the
// token file, as "name" or "name|group1,group2" (e.g. a service account:
// "system:serviceaccount:ns:sa|system:serviceaccounts"). namespaces are
// created, each with its default ServiceAccount.
func Start(t testing.TB, users []string, namespaces ...string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Skipf("kubetest: %v", err)
	}
	etcd := etcdtest.Start(t)
	dir := t.TempDir()
	s := &Server{tokens: map[string]string{}}

	// Token file: token,user,uid,"group1,group2".
	var tf bytes.Buffer
	add := func(user, groups string) {
		tok := randHex(t)
		s.tokens[user] = tok
		fmt.Fprintf(&tf, "%s,%s,%s,%q\n", tok, user, user, groups)
	}
	add(AdminUser, "system:masters")
	add(StrangerUser, "")
	for _, u := range users {
		name, groups := splitUser(u)
		add(name, groups)
	}
	tokenFile := filepath.Join(dir, "tokens.csv")
	must(t, os.WriteFile(tokenFile, tf.Bytes(), 0o600))

	// The service-account signing key (required flags even though no
	// token is ever issued here).
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	must(t, err)
	keyFile := filepath.Join(dir, "sa.key")
	must(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600))

	certDir := filepath.Join(dir, "certs")
	port := freePort(t)
	s.URL = "https://127.0.0.1:" + strconv.Itoa(port)
	logPath := filepath.Join(dir, "kube-apiserver.log")
	done := runProcess(t, bin, logPath,
		"--etcd-servers="+etcd.Endpoint(),
		"--etcd-prefix=/registry-"+randHex(t)[:8],
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		// Self-signed serving certificate for localhost/127.0.0.1, written
		// here; the clients trust exactly that certificate.
		"--cert-dir="+certDir,
		"--token-auth-file="+tokenFile,
		"--authorization-mode=RBAC",
		"--anonymous-auth=false",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+keyFile,
		"--service-account-signing-key-file="+keyFile,
		"--service-cluster-ip-range=10.96.0.0/16",
		// The endpoint reconciler would publish the loopback advertise
		// address into the kubernetes Service, which the API refuses.
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
		"--watch-cache=true",
		"--v=0",
	)

	// Ready: the cert exists and /readyz answers 200 (post-start hooks,
	// RBAC bootstrap roles included, have run).
	certFile := filepath.Join(certDir, "apiserver.crt")
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("kubetest: kube-apiserver exited:\n%s", tail(b, 3000))
		default:
		}
		if s.caData == nil {
			if b, err := os.ReadFile(certFile); err == nil && len(b) > 0 {
				s.caData = b
			}
		}
		if s.caData != nil && s.ready() {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("kubetest: kube-apiserver not ready in 90s:\n%s", tail(b, 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.Kubeconfig = filepath.Join(dir, "kubeconfig")
	must(t, s.writeKubeconfig(s.Kubeconfig, AdminUser))
	for _, ns := range namespaces {
		s.EnsureNamespace(t, ns)
	}
	return s
}

// runProcess starts bin with args, its output in logPath, and stops it
// (SIGINT, then SIGKILL after 10 s) at cleanup, showing the log's tail
// when the test failed. The channel closes when the process exits.
func runProcess(t testing.TB, bin, logPath string, args ...string) <-chan struct{} {
	t.Helper()
	logf, err := os.Create(logPath)
	must(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	must(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log (tail):\n%s", filepath.Base(bin), tail(b, 3000))
		}
	})
	return done
}

// StartControllerManager runs kube-controller-manager against the server
// with only the named controllers (kube-controller-manager's
// --controllers names: "garbagecollector", "endpointslice", ...), as the
// admin identity, and stops it at cleanup; it skips the test when the
// binary is absent. It serves nothing (--secure-port=0), so it opens no
// port of its own. Start it after the CRDs the test needs are installed:
// the garbage collector discovers resources at start and then only every
// 30 s.
func (s *Server) StartControllerManager(t testing.TB, controllers ...string) {
	t.Helper()
	bin, err := ControllerManagerBinary()
	if err != nil {
		t.Skipf("kubetest: %v", err)
	}
	if len(controllers) == 0 {
		controllers = []string{"garbagecollector"}
	}
	dir := t.TempDir()
	done := runProcess(t, bin, filepath.Join(dir, "kube-controller-manager.log"),
		"--kubeconfig="+s.Kubeconfig,
		"--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		// Node and pod lifecycle controllers are off, so pods on a node
		// nobody runs stay as the test writes them.
		"--v=0",
	)
	select {
	case <-done:
		t.Fatalf("kubetest: kube-controller-manager exited at once (log in %s)", dir)
	case <-time.After(200 * time.Millisecond):
	}
}

// EnsureNamespace creates a namespace and its default ServiceAccount
// (which the ServiceAccount admission plugin requires before any Pod).
func (s *Server) EnsureNamespace(t testing.TB, ns string) {
	t.Helper()
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Create(ctx, "/api/v1/namespaces", Object{"apiVersion": "v1", "kind": "Namespace", "metadata": Object{"name": ns}}); err != nil && !IsAlreadyExists(err) {
		t.Fatalf("kubetest: namespace %s: %v", ns, err)
	}
	sa := Object{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": Object{"name": "default"}}
	if _, err := c.Create(ctx, "/api/v1/namespaces/"+ns+"/serviceaccounts", sa); err != nil && !IsAlreadyExists(err) {
		t.Fatalf("kubetest: default ServiceAccount in %s: %v", ns, err)
	}
}

// ReadyPod creates a Pod with labels and marks it Running and Ready
// through the status subresource: there is no kubelet, so a worker that
// registers as this pod (kube discovery's record) is otherwise never
// selected.
func (s *Server) ReadyPod(t testing.TB, ns, name string, labels map[string]string) {
	t.Helper()
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := Object{"apiVersion": "v1", "kind": "Pod", "metadata": Object{"name": name, "labels": labels},
		"spec": Object{"containers": []any{Object{"name": "w", "image": "x"}}}}
	path := "/api/v1/namespaces/" + ns + "/pods"
	got, err := c.Create(ctx, path, p)
	if err != nil {
		t.Fatalf("kubetest: pod %s/%s: %v", ns, name, err)
	}
	got["status"] = Object{"phase": "Running", "conditions": []any{Object{"type": "Ready", "status": "True"}}}
	if _, err := c.Update(ctx, path+"/"+name+"/status", got); err != nil {
		t.Fatalf("kubetest: pod %s/%s status: %v", ns, name, err)
	}
}

func (s *Server) ready() bool {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.caData) {
		return false
	}
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest("GET", s.URL+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer "+s.tokens[AdminUser])
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// WriteKubeconfig writes a kubeconfig for user to path.
func (s *Server) WriteKubeconfig(t testing.TB, path, user string) {
	t.Helper()
	must(t, s.writeKubeconfig(path, user))
}

func (s *Server) writeKubeconfig(path, user string) error {
	// The format is kubeconfig v1 (https://kubernetes.io/docs/reference/config-api/kubeconfig.v1/);
	// written by hand so that tests need no clientcmd.
	ca := base64.StdEncoding.EncodeToString(s.caData)
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: test
  context:
    cluster: test
    user: %s
current-context: test
`, s.URL, ca, user, s.tokens[user], user)
	return os.WriteFile(path, []byte(kc), 0o600)
}

func splitUser(u string) (name, groups string) {
	// "system:serviceaccount:ns:sa:system:serviceaccounts" is ambiguous with
	// colons, so groups are introduced by "|".
	for i := 0; i < len(u); i++ {
		if u[i] == '|' {
			return u[:i], u[i+1:]
		}
	}
	return u, ""
}

func randHex(t testing.TB) string {
	b := make([]byte, 16)
	_, err := rand.Read(b)
	must(t, err)
	return hex.EncodeToString(b)
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
