package eventplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

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
	raise := func(err error) {
		msg := "NATS connection lost; KV events are not flowing, reconnecting"
		if err != nil {
			msg += ": " + err.Error()
		}
		board.Raise(DiagDisconnected, "nats", health.Error, msg, "url", url)
	}
	nc, err := nats.Connect(url,
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
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { raise(err) }),
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
	)
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
func StartServer(addr string) (*Server, error) {
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
	srv, err := server.NewServer(&server.Options{
		Host: host, Port: p, NoLog: true, NoSigs: true,
		// Relayed batches can be large; the default 1 MB is too tight for a
		// scheduler step storing thousands of blocks.
		MaxPayload: 8 << 20,
	})
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

// URL is the server's client URL.
func (s *Server) URL() string { return s.srv.ClientURL() }

// Shutdown stops the server.
func (s *Server) Shutdown() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}
