package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/tandemllm/tandem/authn"
)

// -secure (go test ./e2e -run TestMultiProcess -args -secure) runs this
// package's multi-process tests with every protection on: mutual TLS
// between frontend and workers, API keys and HTTPS on the OpenAI servers,
// NATS with a token and mutual TLS. The processes get the flags from
// secureArgs; the tests' HTTP clients present the key and trust the CA
// through http.DefaultTransport (setUpSecure) and testTransport.
var secure struct {
	on        bool
	dir       string
	key       string
	natsToken string
	trust     *tls.Config
}

const testAPIKey = "tk-multiprocess-test-key-0001"

// setUpSecure makes the certificates and key file (TestMain) when on. It
// returns a cleanup.
func setUpSecure(on bool) (func(), error) {
	if !on {
		return func() {}, nil
	}
	dir, err := os.MkdirTemp("", "tandem-secure-test-")
	if err != nil {
		return nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	if _, err := authn.Init(filepath.Join(dir, "certs"), 1, 1, []string{"localhost", "127.0.0.1"}, 24*60*60*1e9); err != nil {
		cleanup()
		return nil, err
	}
	secure.key = filepath.Join(dir, "keys")
	if err := os.WriteFile(secure.key, []byte("# test clients\n"+testAPIKey+"\n"), 0o600); err != nil {
		cleanup()
		return nil, err
	}
	secure.natsToken = filepath.Join(dir, "nats-token")
	if err := os.WriteFile(secure.natsToken, []byte("multiprocess-nats-token-0001\n"), 0o600); err != nil {
		cleanup()
		return nil, err
	}
	ca, err := os.ReadFile(filepath.Join(dir, "certs", "ca.crt"))
	if err != nil {
		cleanup()
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	secure.on, secure.dir, secure.trust = true, filepath.Join(dir, "certs"), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	http.DefaultTransport = testTransport(0)
	return cleanup, nil
}

// keyed adds the API key to every request.
type keyed struct{ http.RoundTripper }

func (k keyed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+testAPIKey)
	return k.RoundTripper.RoundTrip(r)
}

// testTransport is the tests' HTTP transport: plain, or in secure mode
// trusting the test CA and presenting the API key.
func testTransport(idlePerHost int) http.RoundTripper {
	t := &http.Transport{MaxIdleConnsPerHost: idlePerHost, ForceAttemptHTTP2: true}
	if !secure.on {
		return t
	}
	t.TLSClientConfig = secure.trust
	return keyed{t}
}

// secureArgs adds the protections' flags to a tandem command line.
func secureArgs(args string) string {
	if !secure.on {
		return args
	}
	mtls := func(name string) string {
		return fmt.Sprintf(" --mtls-ca %s --mtls-cert %s --mtls-key %s", filepath.Join(secure.dir, "ca.crt"),
			filepath.Join(secure.dir, name+".crt"), filepath.Join(secure.dir, name+".key"))
	}
	https := fmt.Sprintf(" --api-key-file %s --tls-cert %s --tls-key %s", secure.key,
		filepath.Join(secure.dir, "frontend-1.crt"), filepath.Join(secure.dir, "frontend-1.key"))
	natsAuth := func(name string) string {
		if !strings.Contains(args, "--event-plane nats") {
			return ""
		}
		return fmt.Sprintf(" --nats-token-file %s --nats-tls-ca %s --nats-tls-cert %s --nats-tls-key %s", secure.natsToken,
			filepath.Join(secure.dir, "ca.crt"), filepath.Join(secure.dir, name+".crt"), filepath.Join(secure.dir, name+".key"))
	}
	switch strings.Fields(args)[0] {
	case "frontend":
		return args + mtls("frontend-1") + https + natsAuth("frontend-1")
	case "serve":
		return args + https
	case "worker":
		// A worker with --openai-addr stays plain HTTP: it stands in for
		// a vLLM server that other tests point an upstream engine at.
		return args + mtls("worker-1") + natsAuth("worker-1")
	}
	return args
}
