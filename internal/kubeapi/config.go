// Package kubeapi is a lean Kubernetes API client on net/http: the
// connection settings of a pod's service account or of a kubeconfig file
// (bearer token or token file, client certificate, basic auth, exec
// credential plugins, CA, TLS server name, proxy), JSON requests, list
// pagination and the watch stream. Callers decode objects into their own
// minimal structs, so the typed API packages of client-go (every API group
// registered in one scheme) stay out of the processes that only follow pods
// and EndpointSlices or patch a scale. The Kubernetes operator keeps
// client-go and controller-runtime in its own binary.
package kubeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

// ErrNotInCluster is InClusterConfig's error outside a pod.
var ErrNotInCluster = errors.New("unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined")

// Paths of a pod's service account (the kubelet mounts them).
const (
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	maxCredentialFile = 1 << 20
	maxKubeconfig     = 16 << 20
)

// Config says how to reach one API server as one identity.
type Config struct {
	// Host is the server's URL (https://host:port) or host:port.
	Host string
	// BearerToken is sent as "Authorization: Bearer"; BearerTokenFile, if
	// set, is read instead and read again every minute (a pod's bound
	// service account token rotates).
	BearerToken     string
	BearerTokenFile string
	// Username and Password: HTTP basic auth (kubeconfig username/password).
	Username, Password string
	// TLS: the CA bundle (PEM), the client certificate and key (PEM),
	// the name to verify the server's certificate against, and whether to
	// skip verification (kubeconfig insecure-skip-tls-verify).
	CAData, CertData, KeyData []byte
	ServerName                string
	Insecure                  bool
	// Exec runs a credential plugin (kubeconfig users[].user.exec).
	Exec *ExecConfig
	// ProxyURL overrides the environment's HTTP(S)_PROXY (kubeconfig
	// proxy-url).
	ProxyURL string
	// Timeout bounds one non-watch request (0: DefaultTimeout).
	Timeout time.Duration
	// Namespace is the kubeconfig context's namespace, or the pod's.
	Namespace string
}

// InClusterConfig is the pod's service account: the API server from
// KUBERNETES_SERVICE_HOST/PORT, its token file (re-read as it rotates) and
// CA.
func InClusterConfig() (*Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, ErrNotInCluster
	}
	tokenFile := filepath.Join(serviceAccountDir, "token")
	if _, err := readBounded(tokenFile, maxCredentialFile); err != nil {
		return nil, fmt.Errorf("kubeapi: service account token: %w", err)
	}
	ca, err := readBounded(filepath.Join(serviceAccountDir, "ca.crt"), maxCredentialFile)
	if err != nil {
		return nil, fmt.Errorf("kubeapi: service account CA: %w", err)
	}
	if _, err := caPool(ca); err != nil {
		return nil, fmt.Errorf("kubeapi: service account CA: %w", err)
	}
	ns, _ := readBounded(filepath.Join(serviceAccountDir, "namespace"), maxCredentialFile)
	return &Config{
		Host:            "https://" + net.JoinHostPort(host, port),
		BearerTokenFile: tokenFile,
		CAData:          ca,
		Namespace:       strings.TrimSpace(string(ns)),
	}, nil
}

// BuildConfigFromFlags reads a kubeconfig file (its current context) and,
// when masterURL is not empty, points it at that server instead. With
// neither, it is InClusterConfig. Relative file paths in the kubeconfig
// are relative to its directory, as kubectl reads them.
func BuildConfigFromFlags(masterURL, kubeconfigPath string) (*Config, error) {
	if kubeconfigPath == "" {
		c, err := InClusterConfig()
		if err != nil && masterURL != "" {
			return &Config{Host: masterURL}, nil
		}
		if err != nil {
			return nil, err
		}
		if masterURL != "" {
			c.Host = masterURL
		}
		return c, nil
	}
	c, err := loadKubeconfig(kubeconfigPath)
	if err != nil {
		return nil, err
	}
	if masterURL != "" {
		c.Host = masterURL
	}
	return c, nil
}

// kubeconfig is the part of the kubeconfig v1 format a client needs
// (https://kubernetes.io/docs/reference/config-api/kubeconfig.v1/).
type kubeconfig struct {
	CurrentContext string `yaml:"current-context"`
	Clusters       []struct {
		Name    string `yaml:"name"`
		Cluster struct {
			Server                   string `yaml:"server"`
			CertificateAuthority     string `yaml:"certificate-authority"`
			CertificateAuthorityData string `yaml:"certificate-authority-data"`
			InsecureSkipTLSVerify    bool   `yaml:"insecure-skip-tls-verify"`
			TLSServerName            string `yaml:"tls-server-name"`
			ProxyURL                 string `yaml:"proxy-url"`
		} `yaml:"cluster"`
	} `yaml:"clusters"`
	Users []struct {
		Name string `yaml:"name"`
		User struct {
			Token                 string         `yaml:"token"`
			TokenFile             string         `yaml:"tokenFile"`
			ClientCertificate     string         `yaml:"client-certificate"`
			ClientCertificateData string         `yaml:"client-certificate-data"`
			ClientKey             string         `yaml:"client-key"`
			ClientKeyData         string         `yaml:"client-key-data"`
			Username              string         `yaml:"username"`
			Password              string         `yaml:"password"`
			Exec                  *ExecConfig    `yaml:"exec"`
			AuthProvider          map[string]any `yaml:"auth-provider"`
		} `yaml:"user"`
	} `yaml:"users"`
	Contexts []struct {
		Name    string `yaml:"name"`
		Context struct {
			Cluster   string `yaml:"cluster"`
			User      string `yaml:"user"`
			Namespace string `yaml:"namespace"`
		} `yaml:"context"`
	} `yaml:"contexts"`
}

// ExecConfig is a kubeconfig credential plugin: a command that prints an
// ExecCredential (client.authentication.k8s.io) with a token or a client
// certificate.
type ExecConfig struct {
	Command    string   `yaml:"command"`
	Args       []string `yaml:"args"`
	APIVersion string   `yaml:"apiVersion"`
	Env        []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	// Dir resolves a relative Command (the kubeconfig's directory).
	Dir string `yaml:"-"`
}

func loadKubeconfig(path string) (*Config, error) {
	b, err := readBounded(path, maxKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeapi: kubeconfig: %w", err)
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return nil, fmt.Errorf("kubeapi: kubeconfig %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if kc.CurrentContext == "" {
		return nil, fmt.Errorf("kubeapi: kubeconfig %s: no current-context", path)
	}
	c := &Config{}
	var clusterName, userName string
	found := false
	for _, x := range kc.Contexts {
		if x.Name == kc.CurrentContext {
			clusterName, userName, c.Namespace, found = x.Context.Cluster, x.Context.User, x.Context.Namespace, true
		}
	}
	if !found {
		return nil, fmt.Errorf("kubeapi: kubeconfig %s: context %q not found", path, kc.CurrentContext)
	}
	found = false
	for _, x := range kc.Clusters {
		if x.Name != clusterName {
			continue
		}
		found = true
		cl := x.Cluster
		c.Host, c.Insecure, c.ServerName, c.ProxyURL = cl.Server, cl.InsecureSkipTLSVerify, cl.TLSServerName, cl.ProxyURL
		if c.CAData, err = dataOrFile(cl.CertificateAuthorityData, cl.CertificateAuthority, dir); err != nil {
			return nil, fmt.Errorf("kubeapi: kubeconfig %s: cluster %q certificate authority: %w", path, clusterName, err)
		}
	}
	if !found {
		return nil, fmt.Errorf("kubeapi: kubeconfig %s: cluster %q not found", path, clusterName)
	}
	if c.Host == "" {
		return nil, fmt.Errorf("kubeapi: kubeconfig %s: cluster %q has no server", path, clusterName)
	}
	for _, x := range kc.Users {
		if x.Name != userName {
			continue
		}
		u := x.User
		if u.AuthProvider != nil {
			return nil, fmt.Errorf("kubeapi: kubeconfig %s: user %q uses an auth-provider, which Kubernetes removed; use an exec credential plugin (e.g. gke-gcloud-auth-plugin, kubelogin)", path, userName)
		}
		c.BearerToken, c.Username, c.Password = u.Token, u.Username, u.Password
		if u.TokenFile != "" {
			c.BearerTokenFile = resolve(u.TokenFile, dir)
		}
		if c.CertData, err = dataOrFile(u.ClientCertificateData, u.ClientCertificate, dir); err != nil {
			return nil, fmt.Errorf("kubeapi: kubeconfig %s: user %q client certificate: %w", path, userName, err)
		}
		if c.KeyData, err = dataOrFile(u.ClientKeyData, u.ClientKey, dir); err != nil {
			return nil, fmt.Errorf("kubeapi: kubeconfig %s: user %q client key: %w", path, userName, err)
		}
		if u.Exec != nil {
			e := *u.Exec
			e.Dir = dir
			c.Exec = &e
		}
	}
	// A context without a user (or naming none found) is anonymous, as
	// kubectl treats it.
	return c, nil
}

func resolve(p, dir string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

func dataOrFile(data, file, dir string) ([]byte, error) {
	if data != "" {
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(data))
		if err != nil {
			return nil, fmt.Errorf("base64: %w", err)
		}
		return b, nil
	}
	if file == "" {
		return nil, nil
	}
	return readBounded(resolve(file, dir), maxCredentialFile)
}

// readBounded reads a whole file of at most max bytes.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if n > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, max)
	}
	return buf.Bytes(), nil
}

func caPool(pem []byte) (*x509.CertPool, error) {
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		return nil, errors.New("no PEM certificate found")
	}
	return p, nil
}

// tlsConfig builds the transport's TLS settings; the client certificate
// comes from the config or, per handshake, from the exec plugin.
func (c *Config) tlsConfig(creds *credentials) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.Insecure} //nolint:gosec // kubeconfig's insecure-skip-tls-verify, the user's choice
	if len(c.CAData) > 0 {
		p, err := caPool(c.CAData)
		if err != nil {
			return nil, fmt.Errorf("kubeapi: CA: %w", err)
		}
		tc.RootCAs = p
	}
	switch {
	case len(c.CertData) > 0 || len(c.KeyData) > 0:
		cert, err := tls.X509KeyPair(c.CertData, c.KeyData)
		if err != nil {
			return nil, fmt.Errorf("kubeapi: client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	case c.Exec != nil:
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
			defer cancel()
			cr, err := creds.get(ctx)
			if err != nil {
				return nil, err
			}
			if cr.cert == nil {
				return &tls.Certificate{}, nil
			}
			return cr.cert, nil
		}
	}
	return tc, nil
}

const (
	tokenFilePeriod = time.Minute
	execTimeout     = 2 * time.Minute
	maxExecOutput   = 1 << 20
)

// credentials hands out the current token (and exec client certificate),
// re-reading a token file every minute and re-running an exec plugin when
// its credential expires or the server refused it.
type credentials struct {
	cfg *Config

	mu      sync.Mutex
	cur     credential
	expires time.Time // zero: until invalidated
	valid   bool
}

type credential struct {
	token string
	cert  *tls.Certificate
}

func (cs *credentials) get(ctx context.Context) (credential, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.valid && (cs.expires.IsZero() || time.Now().Before(cs.expires)) {
		return cs.cur, nil
	}
	switch {
	case cs.cfg.Exec != nil:
		cr, exp, err := runExec(ctx, cs.cfg.Exec, cs.cfg.Host)
		if err != nil {
			return credential{}, err
		}
		cs.cur, cs.expires, cs.valid = cr, exp, true
	case cs.cfg.BearerTokenFile != "":
		b, err := readBounded(cs.cfg.BearerTokenFile, maxCredentialFile)
		if err != nil {
			if cs.cur.token != "" {
				return cs.cur, nil // keep the last token; the file may be mid-rotation
			}
			return credential{}, fmt.Errorf("kubeapi: token file: %w", err)
		}
		cs.cur = credential{token: strings.TrimSpace(string(b))}
		cs.expires, cs.valid = time.Now().Add(tokenFilePeriod), true
	default:
		cs.cur, cs.valid = credential{token: cs.cfg.BearerToken}, true
	}
	return cs.cur, nil
}

// invalidate drops a cached exec credential after a 401.
func (cs *credentials) invalidate() {
	cs.mu.Lock()
	if cs.cfg.Exec != nil {
		cs.valid = false
	}
	cs.mu.Unlock()
}

// runExec runs a credential plugin and reads its ExecCredential.
func runExec(ctx context.Context, e *ExecConfig, host string) (credential, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	command := e.Command
	if strings.Contains(command, string(filepath.Separator)) {
		command = resolve(command, e.Dir)
	}
	cmd := exec.CommandContext(ctx, command, e.Args...)
	cmd.Env = os.Environ()
	for _, kv := range e.Env {
		cmd.Env = append(cmd.Env, kv.Name+"="+kv.Value)
	}
	apiVersion := e.APIVersion
	if apiVersion == "" {
		apiVersion = "client.authentication.k8s.io/v1"
	}
	in, _ := json.Marshal(map[string]any{
		"apiVersion": apiVersion, "kind": "ExecCredential",
		"spec": map[string]any{"interactive": false, "cluster": map[string]any{"server": host}},
	})
	cmd.Env = append(cmd.Env, "KUBERNETES_EXEC_INFO="+string(in))
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limitWriter{w: &out, n: maxExecOutput}, &limitWriter{w: &stderr, n: 64 << 10}
	if err := cmd.Run(); err != nil {
		return credential{}, time.Time{}, fmt.Errorf("kubeapi: exec credential plugin %s: %w: %s", e.Command, err, strings.TrimSpace(stderr.String()))
	}
	var ec struct {
		Status struct {
			Token                 string `json:"token"`
			ClientCertificateData string `json:"clientCertificateData"`
			ClientKeyData         string `json:"clientKeyData"`
			ExpirationTimestamp   string `json:"expirationTimestamp"`
		} `json:"status"`
	}
	if err := json.Unmarshal(out.Bytes(), &ec); err != nil {
		return credential{}, time.Time{}, fmt.Errorf("kubeapi: exec credential plugin %s: output: %w", e.Command, err)
	}
	var cr credential
	cr.token = ec.Status.Token
	if ec.Status.ClientCertificateData != "" {
		cert, err := tls.X509KeyPair([]byte(ec.Status.ClientCertificateData), []byte(ec.Status.ClientKeyData))
		if err != nil {
			return credential{}, time.Time{}, fmt.Errorf("kubeapi: exec credential plugin %s: client certificate: %w", e.Command, err)
		}
		cr.cert = &cert
	}
	if cr.token == "" && cr.cert == nil {
		return credential{}, time.Time{}, fmt.Errorf("kubeapi: exec credential plugin %s: no token and no client certificate", e.Command)
	}
	var exp time.Time
	if ec.Status.ExpirationTimestamp != "" {
		t, err := time.Parse(time.RFC3339, ec.Status.ExpirationTimestamp)
		if err != nil {
			return credential{}, time.Time{}, fmt.Errorf("kubeapi: exec credential plugin %s: expirationTimestamp: %w", e.Command, err)
		}
		exp = t
	}
	return cr, exp, nil
}

type limitWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if len(p) > l.n {
		return 0, errors.New("output too large")
	}
	l.n -= len(p)
	return l.w.Write(p)
}

// hostURL parses Host, defaulting the scheme to https.
func (c *Config) hostURL() (*url.URL, error) {
	h := c.Host
	if h == "" {
		return nil, errors.New("kubeapi: no API server host")
	}
	if !strings.Contains(h, "://") {
		h = "https://" + h
	}
	u, err := url.Parse(h)
	if err != nil {
		return nil, fmt.Errorf("kubeapi: host %q: %w", c.Host, err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, fmt.Errorf("kubeapi: host %q: scheme %q is neither https nor http", c.Host, u.Scheme)
	}
	return u, nil
}
