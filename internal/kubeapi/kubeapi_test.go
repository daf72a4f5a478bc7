package kubeapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSelector(t *testing.T) {
	web := map[string]string{"app": "web", "tier": "front"}
	cases := []struct {
		sel     string
		matches bool
		bad     bool
	}{
		{sel: "", matches: true},
		{sel: "app=web", matches: true},
		{sel: "app==web", matches: true},
		{sel: "app=db", matches: false},
		{sel: "app!=db", matches: true},
		{sel: "app=web,tier=front", matches: true},
		{sel: "app=web, tier=back", matches: false},
		{sel: "app in (db, web)", matches: true},
		{sel: "app notin (web)", matches: false},
		{sel: "tier", matches: true},
		{sel: "!tier", matches: false},
		{sel: "!zone", matches: true},
		{sel: "app.kubernetes.io/component=tandem-worker", matches: false},
		{sel: "missing!=x", matches: true},
		{sel: "app=", matches: false},
		{sel: "app=web,", bad: true},
		{sel: "app in ()", bad: true},
		{sel: "app in (web", bad: true},
		{sel: "=web", bad: true},
		{sel: "-app=web", bad: true},
		{sel: "app=we b", bad: true},
		{sel: "Bad_Prefix.io/app=web", bad: true},
		{sel: "app=" + strings.Repeat("x", 64), bad: true},
	}
	for _, c := range cases {
		s, err := ParseSelector(c.sel)
		if c.bad {
			if err == nil {
				t.Errorf("%q: parsed, want an error", c.sel)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.sel, err)
			continue
		}
		if got := s.Matches(web); got != c.matches {
			t.Errorf("%q matches %v: %v, want %v", c.sel, web, got, c.matches)
		}
	}
}

// pki is a CA with a server certificate for 127.0.0.1 and a client
// certificate.
type pki struct {
	caPEM                   []byte
	server                  tls.Certificate
	clientCert, clientKey   []byte
	clientPool, serverRoots *x509.CertPool
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(tmpl *x509.Certificate) ([]byte, []byte) {
		k := key()
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalECPrivateKey(k)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	}
	p := &pki{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
	sc, sk := issue(&x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "apiserver"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"kubernetes.default"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)})
	if p.server, err = tls.X509KeyPair(sc, sk); err != nil {
		t.Fatal(err)
	}
	p.clientCert, p.clientKey = issue(&x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "alice", Organization: []string{"team"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)})
	p.clientPool = x509.NewCertPool()
	p.clientPool.AddCert(ca)
	return p
}

// apiServer is an HTTPS server that requires a client certificate when
// mtls is set and records who called.
func apiServer(t *testing.T, p *pki, mtls bool, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewUnstartedServer(h)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: p.clientPool}
	if mtls {
		s.TLS.ClientAuth = tls.RequireAndVerifyClientCert
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func writeFile(t *testing.T, dir, name string, b []byte, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKubeconfigAuth reads kubeconfigs of every supported kind and calls
// a TLS server with each: the server sees the identity the file names.
func TestKubeconfigAuth(t *testing.T) {
	p := newPKI(t)
	who := make(chan string, 1)
	handler := func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Authorization")
		if len(r.TLS.PeerCertificates) > 0 {
			id = "cert:" + r.TLS.PeerCertificates[0].Subject.CommonName
		}
		select {
		case who <- id:
		default:
		}
		_, _ = io.WriteString(w, `{"kind":"Namespace","metadata":{"name":"x"}}`)
	}
	plain := apiServer(t, p, false, handler)
	mtls := apiServer(t, p, true, handler)
	dir := t.TempDir()
	writeFile(t, dir, "ca.crt", p.caPEM, 0o600)
	writeFile(t, dir, "client.crt", p.clientCert, 0o600)
	writeFile(t, dir, "client.key", p.clientKey, 0o600)
	writeFile(t, dir, "token", []byte("file-token\n"), 0o600)
	writeFile(t, dir, "plugin.sh", []byte(`#!/bin/sh
case "$KUBERNETES_EXEC_INFO" in *'"kind":"ExecCredential"'*) ;; *) echo "no exec info" >&2; exit 1;; esac
echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"'"$TOKEN_PREFIX"'-exec-token"}}'
`), 0o700)
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	kubeconfig := func(server, cluster, user string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: c
contexts:
- name: c
  context: {cluster: k, user: u, namespace: serving}
- name: other
  context: {cluster: nowhere, user: nobody}
clusters:
- name: k
  cluster:
    server: %s
%s
users:
- name: u
  user:
%s
`, server, cluster, user)
	}
	caFile := "    certificate-authority: ca.crt"
	caData := "    certificate-authority-data: " + b64(p.caPEM)
	cases := []struct {
		name, server, cluster, user, want string
	}{
		{"token, CA file", plain.URL, caFile, "    token: tok-1", "Bearer tok-1"},
		{"token file (relative), CA data", plain.URL, caData, "    tokenFile: token", "Bearer file-token"},
		{"client certificate files", mtls.URL, caFile, "    client-certificate: client.crt\n    client-key: client.key", "cert:alice"},
		{"client certificate data", mtls.URL, caData, "    client-certificate-data: " + b64(p.clientCert) + "\n    client-key-data: " + b64(p.clientKey), "cert:alice"},
		{"basic auth", plain.URL, caFile, "    username: bob\n    password: pw", "Basic " + b64([]byte("bob:pw"))},
		{"exec plugin", plain.URL, caFile, "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: ./plugin.sh\n      env: [{name: TOKEN_PREFIX, value: p1}]", "Bearer p1-exec-token"},
		{"insecure, server name", plain.URL, "    insecure-skip-tls-verify: true\n    tls-server-name: kubernetes.default", "    token: tok-2", "Bearer tok-2"},
		{"CA and server name", strings.Replace(plain.URL, "127.0.0.1", "localhost", 1), caFile + "\n    tls-server-name: kubernetes.default", "    token: tok-3", "Bearer tok-3"},
	}
	for i, c := range cases {
		path := writeFile(t, dir, fmt.Sprintf("kc%d", i), []byte(kubeconfig(c.server, c.cluster, c.user)), 0o600)
		cfg, err := BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cfg.Namespace != "serving" {
			t.Errorf("%s: namespace %q", c.name, cfg.Namespace)
		}
		cl, err := NewForConfig(cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var ns struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if err := cl.Do(context.Background(), Request{Method: http.MethodGet, Path: "/api/v1/namespaces/x"}, &ns); err != nil || ns.Metadata.Name != "x" {
			t.Fatalf("%s: %+v %v", c.name, ns, err)
		}
		if got := <-who; got != c.want {
			t.Errorf("%s: server saw %q, want %q", c.name, got, c.want)
		}
	}

	// Without the CA the server is not trusted; without the client
	// certificate the mTLS server refuses.
	cl, _ := NewForConfig(&Config{Host: plain.URL, BearerToken: "x"})
	if err := cl.Do(context.Background(), Request{Method: http.MethodGet, Path: "/"}, nil); err == nil {
		t.Error("untrusted server accepted")
	}
	cl, _ = NewForConfig(&Config{Host: mtls.URL, CAData: p.caPEM})
	if err := cl.Do(context.Background(), Request{Method: http.MethodGet, Path: "/"}, nil); err == nil {
		t.Error("mTLS server answered without a client certificate")
	}

	bad := []struct{ name, kc, want string }{
		{"auth-provider", kubeconfig(plain.URL, caFile, "    auth-provider: {name: gcp}"), "auth-provider"},
		{"no current context", "apiVersion: v1\nkind: Config\n", "no current-context"},
		{"missing cluster", strings.Replace(kubeconfig(plain.URL, caFile, "    token: x"), "current-context: c", "current-context: other", 1), `cluster "nowhere" not found`},
		{"missing CA file", kubeconfig(plain.URL, "    certificate-authority: nope.crt", "    token: x"), "nope.crt"},
		{"not YAML", "{", "kubeconfig"},
	}
	for i, c := range bad {
		path := writeFile(t, dir, fmt.Sprintf("bad%d", i), []byte(c.kc), 0o600)
		if _, err := BuildConfigFromFlags("", path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to mention %q", c.name, err, c.want)
		}
	}
}

// TestInClusterOutside: outside a pod the error is ErrNotInCluster.
func TestInClusterOutside(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := InClusterConfig(); !errors.Is(err, ErrNotInCluster) {
		t.Fatalf("InClusterConfig outside a pod: %v", err)
	}
	if _, err := BuildConfigFromFlags("", ""); !errors.Is(err, ErrNotInCluster) {
		t.Fatalf("BuildConfigFromFlags with nothing: %v", err)
	}
}

// TestListAndWatch: List follows continue tokens; a watch stream yields
// events and bookmarks, ends cleanly at the server's end, and reports
// 410 Gone (as a response or as an ERROR event) as a StatusError.
func TestListAndWatch(t *testing.T) {
	p := newPKI(t)
	s := apiServer(t, p, false, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if got := q.Get("labelSelector"); got != "app=w" {
			http.Error(w, "selector "+got, http.StatusBadRequest)
			return
		}
		switch {
		case q.Get("watch") == "" && q.Get("continue") == "":
			_, _ = io.WriteString(w, `{"metadata":{"resourceVersion":"7","continue":"page2"},"items":[{"metadata":{"name":"a"}}]}`)
		case q.Get("watch") == "":
			_, _ = io.WriteString(w, `{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"b"}}]}`)
		case q.Get("resourceVersion") == "1":
			w.WriteHeader(http.StatusGone)
			_, _ = io.WriteString(w, `{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version: 1 (9)"}`)
		default:
			if q.Get("allowWatchBookmarks") != "true" || q.Get("timeoutSeconds") == "" {
				http.Error(w, "watch options", http.StatusBadRequest)
				return
			}
			_, _ = io.WriteString(w, `{"type":"ADDED","object":{"metadata":{"name":"c","resourceVersion":"10"}}}
{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"11"}}}
{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}
`)
		}
	})
	cl, err := NewForConfig(&Config{Host: s.URL, CAData: p.caPEM, BearerToken: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var names []string
	rv, err := cl.List(ctx, "/api/v1/pods", "app=w", func(raw json.RawMessage) error {
		var o struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		err := json.Unmarshal(raw, &o)
		names = append(names, o.Metadata.Name)
		return err
	})
	if err != nil || rv != "9" || strings.Join(names, ",") != "a,b" {
		t.Fatalf("List: %v rv %q, %v", names, rv, err)
	}
	if _, err := cl.Watch(ctx, "/api/v1/pods", "app=w", "1"); !IsStatus(err, http.StatusGone) {
		t.Fatalf("watch from an expired version: %v, want 410", err)
	}
	w, err := cl.Watch(ctx, "/api/v1/pods", "app=w", rv)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, want := range []string{Added, Bookmark} {
		e, err := w.Next()
		if err != nil || e.Type != want {
			t.Fatalf("event %+v %v, want %s", e, err, want)
		}
	}
	if _, err := w.Next(); !IsStatus(err, http.StatusGone) {
		t.Fatalf("ERROR event: %v, want 410", err)
	}
	if _, err := w.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream: %v, want EOF", err)
	}
}

// TestStatusError: a refusal carries the API's reason and message.
func TestStatusError(t *testing.T) {
	p := newPKI(t)
	s := apiServer(t, p, false, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"kind":"Status","reason":"Forbidden","message":"pods \"w1\" is forbidden: User \"x\" cannot patch resource \"pods\""}`)
	})
	cl, _ := NewForConfig(&Config{Host: s.URL, CAData: p.caPEM})
	err := cl.Do(context.Background(), Request{Method: http.MethodPatch, Path: "/api/v1/namespaces/n/pods/w1", Body: []byte("{}"), ContentType: MergePatch}, nil)
	if !IsStatus(err, http.StatusForbidden) || !strings.Contains(err.Error(), "cannot patch") || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("error %v", err)
	}
}
