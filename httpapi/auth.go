package httpapi

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/anthropic"
	"github.com/tandemllm/tandem/openai"
)

// APIKeys are the keys clients may present (--api-key-file). Keys are held
// as SHA-256 digests and every digest is compared in constant time
// (crypto/subtle), so neither a key's bytes nor its length leak through
// response timing.
type APIKeys struct {
	digests [][sha256.Size]byte
}

// maxKeyFile bounds --api-key-file.
const maxKeyFile = 1 << 20

// LoadAPIKeys reads one key per line; blank lines and lines starting with
// # are skipped. A file that holds no key is an error: it would lock
// every client out.
func LoadAPIKeys(path string) (*APIKeys, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("frontend: api key file: %w", err)
	}
	if fi.Size() > maxKeyFile {
		return nil, fmt.Errorf("frontend: api key file %s is %d bytes (limit %d)", path, fi.Size(), maxKeyFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("frontend: api key file: %w", err)
	}
	k, err := ParseAPIKeys(b)
	if err != nil {
		return nil, fmt.Errorf("frontend: api key file %s: %w", path, err)
	}
	return k, nil
}

// ParseAPIKeys parses the key file's contents.
func ParseAPIKeys(b []byte) (*APIKeys, error) {
	k := &APIKeys{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		if len(s) < 16 {
			return nil, fmt.Errorf("line %d: a key of %d characters is too short to be secret (16 or more)", line, len(s))
		}
		if strings.ContainsAny(s, " \t") {
			return nil, fmt.Errorf("line %d: a key holds no spaces", line)
		}
		k.digests = append(k.digests, sha256.Sum256([]byte(s)))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(k.digests) == 0 {
		return nil, fmt.Errorf("no key")
	}
	return k, nil
}

// Len is the number of keys.
func (k *APIKeys) Len() int { return len(k.digests) }

// Valid reports whether key is one of the keys. It looks at every key
// whatever the outcome.
func (k *APIKeys) Valid(key string) bool {
	d := sha256.Sum256([]byte(key))
	ok := 0
	for i := range k.digests {
		ok |= subtle.ConstantTimeCompare(d[:], k.digests[i][:])
	}
	return ok == 1
}

// requireKey wraps h so that every request must carry
// "Authorization: Bearer <key>" with a valid key, or the key in
// Anthropic's "x-api-key" header (what Anthropic's SDKs send); others get
// OpenAI's 401, or Anthropic's on /v1/messages.
func (s *Server) requireKey(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !found {
			if k := r.Header.Get("X-Api-Key"); k != "" {
				key, found = k, true
			}
		}
		switch {
		case !found || key == "":
			s.metrics.authFailures.WithLabelValues("missing").Inc()
			unauthorizedFor(w, r, "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or in an x-api-key header.")
		case !s.cfg.APIKeys.Valid(key):
			s.metrics.authFailures.WithLabelValues("invalid").Inc()
			unauthorizedFor(w, r, "Incorrect API key provided.")
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// unauthorized answers as OpenAI's API does to a missing or wrong key:
// 401, type invalid_request_error, code invalid_api_key (see
// https://platform.openai.com/docs/guides/error-codes), with the
// WWW-Authenticate challenge of RFC 6750 §3.
func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="tandem"`)
	openai.WriteError(w, &openai.Error{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key", Message: msg})
}

// unauthorizedFor is unauthorized in the shape of the API r calls:
// Anthropic's authentication_error on /v1/messages.
func unauthorizedFor(w http.ResponseWriter, r *http.Request, msg string) {
	if r.URL.Path == "/v1/messages" {
		(&anthropic.Error{Status: http.StatusUnauthorized, Type: "authentication_error", Message: msg}).Write(w, 0)
		return
	}
	unauthorized(w, msg)
}

func newAuthFailures(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tandem_frontend_auth_failures_total",
		Help: "Requests refused with 401: reason missing (no bearer key) or invalid (an unknown key).",
	}, []string{"reason"})
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

// TLSFiles are --tls-cert and --tls-key: the OpenAI server's certificate
// chain and key, PEM.
type TLSFiles struct {
	Cert string
	Key  string
}

// ServerTLS loads f into a server configuration (nil, nil when f is
// empty), so a bad certificate fails at start rather than at the first
// handshake.
func ServerTLS(f TLSFiles) (*tls.Config, error) {
	if f.Cert == "" && f.Key == "" {
		return nil, nil
	}
	if f.Cert == "" || f.Key == "" {
		return nil, fmt.Errorf("frontend: TLS needs both --tls-cert and --tls-key")
	}
	c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("frontend: TLS: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{c}}, nil
}

// Serve runs srv on lis, over TLS when tc is set (HTTP/2 is negotiated
// by ALPN as net/http does for ServeTLS).
func Serve(srv *http.Server, lis net.Listener, tc *tls.Config) error {
	if tc == nil {
		return srv.Serve(lis)
	}
	srv.TLSConfig = tc
	return srv.ServeTLS(lis, "", "")
}
