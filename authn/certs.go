package authn

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that issues the cluster's certificates.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA creates a self-signed ECDSA P-256 CA valid for validity.
func NewCA(name string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("authn: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name, Organization: []string{"Tandem"}},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(validity),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("authn: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, key: key}, nil
}

// LoadCA reads a CA written by WriteFiles (ca.crt, ca.key in dir).
func LoadCA(dir string) (*CA, error) {
	cb, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("authn: %w", err)
	}
	kb, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, fmt.Errorf("authn: %w", err)
	}
	cp, _ := pem.Decode(cb)
	kp, _ := pem.Decode(kb)
	if cp == nil || kp == nil {
		return nil, errors.New("authn: ca.crt or ca.key is not PEM")
	}
	cert, err := x509.ParseCertificate(cp.Bytes)
	if err != nil {
		return nil, fmt.Errorf("authn: ca.crt: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kp.Bytes)
	if err != nil {
		return nil, fmt.Errorf("authn: ca.key: %w", err)
	}
	return &CA{Cert: cert, key: key}, nil
}

// Issued is a certificate and its key, PEM-encoded.
type Issued struct {
	CertPEM, KeyPEM []byte
}

// Issue signs a certificate for the process name with role. hosts (DNS
// names or IPs) become its SANs, for clients that do check host names
// (an OpenAI client of a frontend using it as --tls-cert).
func (ca *CA) Issue(name string, role Role, hosts []string, validity time.Duration) (Issued, error) {
	if _, err := ParseRole(string(role)); err != nil {
		return Issued{}, err
	}
	if name == "" {
		return Issued{}, errors.New("authn: a certificate needs a name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Issued{}, fmt.Errorf("authn: key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"Tandem"}, OrganizationalUnit: []string{string(role)}},
		NotBefore:    time.Now().Add(-time.Minute), NotAfter: time.Now().Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature,
		// Every process is both a TLS client and a TLS server somewhere.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Issued{}, fmt.Errorf("authn: certificate: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Issued{}, err
	}
	return Issued{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}, nil
}

// CertPEM is the CA certificate, PEM-encoded.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// WriteCA writes ca.crt and ca.key (0600) into dir (created 0700).
func (ca *CA) WriteCA(dir string) error {
	kder, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return err
	}
	return writePair(dir, "ca", Issued{CertPEM: ca.CertPEM(), KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})})
}

// WritePair writes name.crt and name.key (0600) into dir (created 0700).
func WritePair(dir, name string, is Issued) error { return writePair(dir, name, is) }

func writePair(dir, name string, is Issued) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("authn: %w", err)
	}
	for _, f := range []struct {
		path string
		b    []byte
		mode os.FileMode
	}{{filepath.Join(dir, name+".crt"), is.CertPEM, 0o644}, {filepath.Join(dir, name+".key"), is.KeyPEM, 0o600}} {
		// O_EXCL: never overwrite a key someone may be using.
		fh, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if err != nil {
			return fmt.Errorf("authn: %w", err)
		}
		_, err = fh.Write(f.b)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("authn: %w", err)
		}
	}
	return nil
}

// Init creates a CA in dir and certificates frontend-1..frontends and
// worker-1..workers, each with hosts as SANs: the quick start of
// `tandem certs init`.
func Init(dir string, frontends, workers int, hosts []string, validity time.Duration) ([]string, error) {
	if frontends < 0 || workers < 0 || frontends > 1000 || workers > 100000 {
		return nil, fmt.Errorf("authn: %d frontends, %d workers: out of range", frontends, workers)
	}
	ca, err := NewCA("Tandem cluster CA", validity)
	if err != nil {
		return nil, err
	}
	if err := ca.WriteCA(dir); err != nil {
		return nil, err
	}
	names := []string{"ca"}
	for _, g := range []struct {
		role Role
		n    int
	}{{RoleFrontend, frontends}, {RoleWorker, workers}} {
		for i := 1; i <= g.n; i++ {
			name := fmt.Sprintf("%s-%d", g.role, i)
			is, err := ca.Issue(name, g.role, hosts, validity)
			if err != nil {
				return names, err
			}
			if err := writePair(dir, name, is); err != nil {
				return names, err
			}
			names = append(names, name)
		}
	}
	return names, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		// crypto/rand does not fail on supported platforms (Go 1.24+).
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
