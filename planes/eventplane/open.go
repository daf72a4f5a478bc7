package eventplane

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/health"
)

// Conn is a process's connection to the event plane, with the embedded
// server when the configuration asks for one (--nats embedded).
type Conn struct {
	*nats.Conn
	server *Server
}

// Open starts the embedded server if cfg asks for it, then connects as
// name (ConnectWith). An embedded server that listens beyond this host
// without authentication raises plane_unauthenticated.
func Open(ctx context.Context, cfg Config, name string, board *health.Board, log *slog.Logger) (*Conn, error) {
	c, url := &Conn{}, cfg.NATS
	if url == "embedded" {
		if authn.Exposed(cfg.EmbeddedAddr) && cfg.Auth.TokenFile == "" && cfg.Auth.CA == "" {
			board.Raise(authn.DiagOpenPlane, "nats", health.Warn,
				"the embedded NATS server listens beyond this host without --nats-token-file or client certificates: anyone can read the KV events and load messages", "addr", cfg.EmbeddedAddr)
		}
		srv, err := StartServerWith(cfg.EmbeddedAddr, cfg.Auth)
		if err != nil {
			return nil, err
		}
		c.server, url = srv, srv.URL()
	}
	nc, err := ConnectWith(ctx, url, name, cfg.Auth, board, log)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.Conn = nc
	return c, nil
}

// Embedded is the embedded server (nil: none).
func (c *Conn) Embedded() *Server { return c.server }

// Close closes the connection, then stops the embedded server.
func (c *Conn) Close() {
	if c.Conn != nil {
		c.Conn.Close()
	}
	if c.server != nil {
		c.server.Shutdown()
	}
}
