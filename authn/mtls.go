package authn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
)

// Role is what a certificate's holder may do in the cluster, carried as
// the certificate's OrganizationalUnit.
type Role string

const (
	// RoleFrontend may call workers' request planes.
	RoleFrontend Role = "frontend"
	// RoleWorker serves a request plane and sends or receives KV blocks.
	RoleWorker Role = "worker"
	// RoleMonitor may only read workers' /metrics and /health (a
	// Prometheus scraper).
	RoleMonitor Role = "monitor"
)

// ParseRole checks a role name.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleFrontend, RoleWorker, RoleMonitor:
		return r, nil
	}
	return "", fmt.Errorf("authn: role %q: want frontend, worker or monitor", s)
}

// Files are the --mtls-ca, --mtls-cert and --mtls-key flags: PEM files of
// the cluster CA, this process's certificate and its private key.
type Files struct {
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// Enabled reports whether any of the files is set.
func (f Files) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Cluster is a loaded mTLS identity: the CA every peer must chain to and
// this process's certificate. A nil *Cluster means plaintext.
type Cluster struct {
	pool *x509.CertPool
	cert tls.Certificate
	name string
	role Role
}

// Load reads f; it returns nil, nil when f is not enabled, and an error
// unless all three files are given and valid.
func Load(f Files) (*Cluster, error) {
	if !f.Enabled() {
		return nil, nil
	}
	if f.CA == "" || f.Cert == "" || f.Key == "" {
		return nil, errors.New("authn: mTLS needs all of --mtls-ca, --mtls-cert and --mtls-key")
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("authn: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("authn: CA %s holds no PEM certificate", f.CA)
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("authn: certificate: %w", err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("authn: certificate: %w", err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("authn: %s is not signed by the CA in %s: %w", f.Cert, f.CA, err)
	}
	role := roleOf(leaf)
	if role == "" {
		return nil, fmt.Errorf("authn: %s names no role (OrganizationalUnit frontend or worker)", f.Cert)
	}
	return &Cluster{pool: pool, cert: cert, name: leaf.Subject.CommonName, role: role}, nil
}

// Name is this process's name (the certificate's CommonName).
func (c *Cluster) Name() string { return c.name }

// Role is this process's role.
func (c *Cluster) Role() Role { return c.role }

// LoadAs is Load for a process that must hold a certificate of role (nil
// when f configures no identity).
func LoadAs(f Files, role Role) (*Cluster, error) {
	c, err := Load(f)
	if err == nil && c != nil && c.Role() != role {
		return nil, fmt.Errorf("--mtls-cert has role %s; a %s needs a %s certificate", c.Role(), role, role)
	}
	return c, err
}

// RoleOf is the role a cluster certificate names ("" for none).
func RoleOf(cert *x509.Certificate) Role { return roleOf(cert) }

func roleOf(cert *x509.Certificate) Role {
	for _, ou := range cert.Subject.OrganizationalUnit {
		if r, err := ParseRole(ou); err == nil {
			return r
		}
	}
	return ""
}

// Server is the TLS configuration of a listener that admits only peers
// whose certificate chains to the cluster CA and has one of the roles.
func (c *Cluster) Server(peers ...Role) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    c.pool,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return checkRole(cs, "client", peers)
		},
	}
}

// Client is the TLS configuration of a connection to a peer with one of
// the roles. The chain is verified against the cluster CA by hand
// because host names are not checked (see the package doc).
func (c *Cluster) Client(peers ...Role) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{c.cert},
		InsecureSkipVerify: true, // replaced by VerifyConnection: CA chain and role, not host name
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("authn: the server sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: c.pool, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("authn: server certificate: %w", err)
			}
			return checkRole(cs, "server", peers)
		},
	}
}

func checkRole(cs tls.ConnectionState, side string, peers []Role) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("authn: the %s sent no certificate", side)
	}
	leaf := cs.PeerCertificates[0]
	if r := roleOf(leaf); !slices.Contains(peers, r) {
		return fmt.Errorf("authn: %s %q has role %q; only %s may connect here", side, leaf.Subject.CommonName, r, joinRoles(peers))
	}
	return nil
}

func joinRoles(rs []Role) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, " or ")
}

// PeerName is the CommonName of a verified TLS peer ("" without one).
func PeerName(cs tls.ConnectionState) string {
	if len(cs.PeerCertificates) == 0 {
		return ""
	}
	return cs.PeerCertificates[0].Subject.CommonName
}

// DiagOpenPlane is raised by a process for each of its listeners that is
// reachable beyond this host with no authentication configured: the
// deployment serves, but anyone who reaches the port is served too. It
// stays while the configuration does.
const DiagOpenPlane = "plane_unauthenticated"

// Exposed reports whether a bound address (host:port) is reachable from
// other hosts: not a loopback address (a wildcard counts as exposed).
func Exposed(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}
