package eventplane

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/health"
)

// Config selects the event plane; it is what the --event-plane and --nats
// flags fill.
type Config struct {
	// Plane is zmq or nats (--event-plane).
	Plane string
	// NATS is the server URL, or "embedded" to start one in this process
	// (--nats).
	NATS string
	// EmbeddedAddr is where an embedded server listens (--nats-addr).
	EmbeddedAddr string
	// SubjectPrefix scopes subjects, so deployments can share a NATS
	// (--nats-subject-prefix).
	SubjectPrefix string
	// Auth is how this process authenticates to NATS and, when it embeds
	// the server, what the server demands of its clients.
	Auth Auth
}

// Auth is NATS's client authentication and TLS (--nats-token-file,
// --nats-tls-ca, --nats-tls-cert, --nats-tls-key). With a token, the
// embedded server refuses connections without it (NATS token auth:
// https://docs.nats.io/running-a-nats-service/configuration/securing_nats/auth_intro/tokens);
// with a certificate it serves TLS, and with a CA as well it requires
// and verifies client certificates (mutual TLS:
// https://docs.nats.io/running-a-nats-service/configuration/securing_nats/tls).
// A client sends the token, trusts the CA (host names are checked, as
// for any NATS server) and presents its certificate when given one.
type Auth struct {
	TokenFile string
	CA        string
	Cert      string
	Key       string
}

func (a Auth) token() (string, error) {
	if a.TokenFile == "" {
		return "", nil
	}
	fi, err := os.Stat(a.TokenFile)
	if err != nil {
		return "", fmt.Errorf("eventplane: NATS token: %w", err)
	}
	if fi.Size() > 4096 {
		return "", fmt.Errorf("eventplane: NATS token file %s is %d bytes", a.TokenFile, fi.Size())
	}
	b, err := os.ReadFile(a.TokenFile)
	if err != nil {
		return "", fmt.Errorf("eventplane: NATS token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if len(t) < 16 {
		return "", fmt.Errorf("eventplane: NATS token in %s is %d characters; 16 or more", a.TokenFile, len(t))
	}
	return t, nil
}

func (a Auth) pool() (*x509.CertPool, error) {
	if a.CA == "" {
		return nil, nil
	}
	b, err := os.ReadFile(a.CA)
	if err != nil {
		return nil, fmt.Errorf("eventplane: NATS CA: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("eventplane: NATS CA %s holds no PEM certificate", a.CA)
	}
	return p, nil
}

func (a Auth) cert() ([]tls.Certificate, error) {
	if a.Cert == "" && a.Key == "" {
		return nil, nil
	}
	if a.Cert == "" || a.Key == "" {
		return nil, errors.New("eventplane: NATS TLS needs both --nats-tls-cert and --nats-tls-key")
	}
	c, err := tls.LoadX509KeyPair(a.Cert, a.Key)
	if err != nil {
		return nil, fmt.Errorf("eventplane: NATS TLS: %w", err)
	}
	return []tls.Certificate{c}, nil
}

// clientTLS is the client side's TLS (nil: plaintext, unless the URL says
// tls://, which uses the system roots).
func (a Auth) clientTLS() (*tls.Config, error) {
	pool, err := a.pool()
	if err != nil {
		return nil, err
	}
	certs, err := a.cert()
	if err != nil {
		return nil, err
	}
	if pool == nil && certs == nil {
		return nil, nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, Certificates: certs}, nil
}

// DefaultConfig returns the flag defaults.
func DefaultConfig() Config {
	return Config{Plane: "zmq", NATS: "nats://127.0.0.1:4222", EmbeddedAddr: "127.0.0.1:4222", SubjectPrefix: "tandem"}
}

// Validate checks the plane and the NATS settings.
func (c Config) Validate() error {
	switch c.Plane {
	case "zmq":
		return nil
	case "nats":
		if c.NATS == "" {
			return errors.New("eventplane: --event-plane nats needs --nats (a URL, or embedded)")
		}
		if c.SubjectPrefix == "" || strings.ContainsAny(c.SubjectPrefix, " *>") {
			return fmt.Errorf("eventplane: invalid subject prefix %q", c.SubjectPrefix)
		}
		return nil
	}
	return fmt.Errorf("eventplane: unknown event plane %q (want zmq or nats)", c.Plane)
}

// Diagnostic codes.
const (
	// DiagDisconnected: the NATS connection is down; events published or
	// sent meanwhile may be lost (routers see the gap).
	DiagDisconnected = "event_plane_disconnected"
	// DiagReconnected is logged when it is back.
	DiagReconnected = "event_plane_reconnected"
	// DiagRelayLoss: a worker's relay lost batches it could not hand to
	// NATS.
	DiagRelayLoss = "event_plane_relay_loss"
)

// KVSubject is the subject of model's KV events. Characters NATS gives a
// meaning to (the separator and wildcards) are replaced, and the model name
// also travels in a header, so two models mapping to one subject are still
// told apart.
func KVSubject(prefix, model string) string { return prefix + ".kv." + token(model) }

// LoadSubject is the subject of model's routing load (router replicas).
func LoadSubject(prefix, model string) string { return prefix + ".load." + token(model) }

func token(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

// Headers of relayed messages.
const (
	hdrWorker = "Tandem-Worker"
	hdrSeq    = "Tandem-Seq"
	hdrModel  = "Tandem-Model"
	hdrFormat = "Tandem-Format"
	hdrRouter = "Tandem-Router"
)

// Connect dials url with reconnection forever. Disconnections raise
// event_plane_disconnected (subject "nats") on board until the connection
// is back. name identifies the process in NATS's monitoring.
func Connect(ctx context.Context, url, name string, board *health.Board, log *slog.Logger) (*nats.Conn, error) {
	return ConnectWith(ctx, url, name, Auth{}, board, log)
}

// ConnectWith is Connect with credentials and TLS.
func ConnectWith(ctx context.Context, url, name string, auth Auth, board *health.Board, log *slog.Logger) (*nats.Conn, error) {
	var extra []nats.Option
	tok, err := auth.token()
	if err != nil {
		return nil, err
	}
	if tok != "" {
		extra = append(extra, nats.Token(tok))
	}
	tc, err := auth.clientTLS()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		extra = append(extra, nats.Secure(tc))
	}
	raise := func(err error) {
		msg := "NATS connection lost; KV events are not flowing, reconnecting"
		if err != nil {
			msg += ": " + err.Error()
		}
		board.Raise(DiagDisconnected, "nats", health.Error, msg, "url", url)
	}
	nc, err := nats.Connect(url, append(extra,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond),
		nats.ReconnectJitter(50*time.Millisecond, 50*time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectBufSize(16<<20),
		nats.Timeout(2*time.Second),
		nats.PingInterval(2*time.Second),
		nats.MaxPingsOutstanding(2),
		nats.ConnectHandler(func(*nats.Conn) {
			board.Clear(DiagDisconnected, "nats", DiagReconnected, "NATS connected")
		}),
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			// nats.go calls this from Close too: a process closing its own
			// connection (or shutting down) has lost nothing.
			if c.IsClosed() || ctx.Err() != nil {
				return
			}
			raise(err)
		}),
		nats.ReconnectHandler(func(*nats.Conn) {
			board.Clear(DiagDisconnected, "nats", DiagReconnected, "NATS connection back; KV events flow again (routers recover gaps as losses)")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Warn("NATS error", "diagnostic_code", DiagDisconnected, "subject", subj, "err", err)
		}),
	)...)
	if err != nil {
		return nil, fmt.Errorf("eventplane: connect %s: %w", url, err)
	}
	if !nc.IsConnected() {
		// RetryOnFailedConnect: the first attempt failed, retries go on.
		raise(nil)
	}
	context.AfterFunc(ctx, nc.Close)
	return nc, nil
}

// Server is an embedded nats-server.
type Server struct {
	srv *server.Server
}

// StartServer starts a NATS server in this process on addr (host:port; port
// 0 picks one). It is a real nats-server, only in-process: single-host
// deployments need no separate broker.
func StartServer(addr string) (*Server, error) { return StartServerWith(addr, Auth{}) }

// StartServerWith starts the embedded server demanding auth of its
// clients (see Auth).
func StartServerWith(addr string, auth Auth) (*Server, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("eventplane: --nats-addr %q: %w", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("eventplane: --nats-addr %q: %w", addr, err)
	}
	if p == 0 {
		p = server.RANDOM_PORT
	}
	opts := &server.Options{
		Host: host, Port: p, NoLog: true, NoSigs: true,
		// Relayed batches can be large; the default 1 MB is too tight for a
		// scheduler step storing thousands of blocks.
		MaxPayload: 8 << 20,
	}
	if opts.Authorization, err = auth.token(); err != nil {
		return nil, err
	}
	certs, err := auth.cert()
	if err != nil {
		return nil, err
	}
	if certs != nil {
		pool, err := auth.pool()
		if err != nil {
			return nil, err
		}
		opts.TLS, opts.TLSTimeout = true, 2
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: certs}
		if pool != nil {
			opts.TLSVerify = true
			opts.TLSConfig.ClientCAs, opts.TLSConfig.ClientAuth = pool, tls.RequireAndVerifyClientCert
			// With client certificates, each connection's permissions
			// follow its certificate's role (roleAuth): the token alone
			// does not let a monitor read event payloads.
			opts.CustomClientAuthentication = &roleAuth{token: opts.Authorization}
			opts.Authorization = ""
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("eventplane: nats server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("eventplane: nats server on %s not ready", addr)
	}
	return &Server{srv: srv}, nil
}

// roleAuth is the embedded server's authentication with mutual TLS: the
// token (when one is configured) and a cluster certificate whose role sets
// the connection's permissions. Frontends and workers publish and
// subscribe to everything (KV events, load messages, their inboxes); a
// monitor (a metrics scraper's certificate) may do neither: a KV event
// carries prompt token ids. Any other role is refused. An external
// nats-server gets the same rule from docs/security.md's settings.
type roleAuth struct{ token string }

// monitorPermissions deny a monitor every subject.
var monitorPermissions = &server.Permissions{
	Publish:   &server.SubjectPermission{Deny: []string{">"}},
	Subscribe: &server.SubjectPermission{Deny: []string{">"}},
}

func (a *roleAuth) Check(c server.ClientAuthentication) bool {
	if a.token != "" {
		o := c.GetOpts()
		if o == nil || subtle.ConstantTimeCompare([]byte(o.Token), []byte(a.token)) != 1 {
			return false
		}
	}
	cs := c.GetTLSConnectionState()
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return false
	}
	leaf := cs.PeerCertificates[0]
	u := &server.User{Username: leaf.Subject.CommonName}
	switch authn.RoleOf(leaf) {
	case authn.RoleFrontend, authn.RoleWorker:
	case authn.RoleMonitor:
		u.Permissions = monitorPermissions
	default:
		return false
	}
	c.RegisterUser(u)
	return true
}

// URL is the server's client URL.
func (s *Server) URL() string { return s.srv.ClientURL() }

// Shutdown stops the server.
func (s *Server) Shutdown() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}
