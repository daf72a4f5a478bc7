package eventplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/planes/kvevents"
)

// RelayConfig configures a worker's relay.
type RelayConfig struct {
	Worker, Model string
	// Prefix is the subject prefix (Config.SubjectPrefix).
	Prefix string
	// Endpoint and ReplayEndpoint are the engine's own ZMQ sockets; the
	// replay socket lets the relay recover what ZMQ drops while it joins.
	Endpoint, ReplayEndpoint string
	// ReplayToken is the engine's replay token (nil: none needed).
	ReplayToken []byte
	// Format re-encodes batches for the wire (the engine's own format, so
	// routers decode what the engine meant).
	Format kvevents.Format
	Board  *health.Board
	Logger *slog.Logger
}

// Relay republishes one engine's KV event batches on NATS.
type Relay struct {
	cfg     RelayConfig
	nc      *nats.Conn
	subject string
	sub     *kvevents.Subscriber
	log     *slog.Logger
	buf     []byte

	relayed, dropped atomic.Uint64
}

// NewRelay prepares a relay; Run does the work.
func NewRelay(nc *nats.Conn, cfg RelayConfig) (*Relay, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("eventplane: relay: the engine publishes no KV events")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Board == nil {
		cfg.Board = health.NewBoard(cfg.Logger, nil)
	}
	r := &Relay{cfg: cfg, nc: nc, subject: KVSubject(cfg.Prefix, cfg.Model), log: cfg.Logger.With("component", "eventplane.relay")}
	sub, err := kvevents.NewSubscriber(kvevents.SubscriberConfig{
		Worker: cfg.Worker, Endpoint: cfg.Endpoint, ReplayEndpoint: cfg.ReplayEndpoint, ReplayToken: cfg.ReplayToken,
		Handler: r, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("eventplane: relay: %w", err)
	}
	r.sub = sub
	return r, nil
}

// Subject is where the relay publishes.
func (r *Relay) Subject() string { return r.subject }

// Run relays until ctx ends.
func (r *Relay) Run(ctx context.Context) { r.sub.Run(ctx) }

// Stats returns the batches relayed and dropped (NATS refused them).
func (r *Relay) Stats() (relayed, dropped uint64) { return r.relayed.Load(), r.dropped.Load() }

// HandleBatch implements kvevents.Handler. The engine's sequence number
// travels unchanged: a router sees exactly the gaps the engine's stream
// has, plus the ones NATS adds.
func (r *Relay) HandleBatch(seq uint64, b *kvevents.Batch) {
	r.buf = kvevents.AppendBatch(r.buf[:0], b, r.cfg.Format)
	m := nats.NewMsg(r.subject)
	m.Header.Set(hdrWorker, r.cfg.Worker)
	m.Header.Set(hdrModel, r.cfg.Model)
	m.Header.Set(hdrSeq, strconv.FormatUint(seq, 10))
	m.Header.Set(hdrFormat, r.cfg.Format.String())
	m.Data = r.buf
	// PublishMsg copies the payload into the connection's buffer (which
	// also holds messages while reconnecting), so buf is free again.
	if err := r.nc.PublishMsg(m); err != nil {
		n := r.dropped.Add(1)
		r.cfg.Board.Raise(DiagRelayLoss, r.cfg.Worker, health.Error,
			"NATS refused KV event batches; routers will see the gap", "err", err, "dropped", n)
		return
	}
	r.relayed.Add(1)
}

// HandleState implements kvevents.Handler.
func (r *Relay) HandleState(s kvevents.StreamStatus) {
	switch s.State {
	case kvevents.StreamLive:
		r.cfg.Board.Clear(DiagRelayLoss, r.cfg.Worker, "", "")
	case kvevents.StreamLoss:
		r.cfg.Board.Raise(DiagRelayLoss, r.cfg.Worker, health.Error,
			"the relay lost batches of its own engine's stream; routers will see the gap", "lost", s.Lost, "err", s.Err)
	default:
		r.log.Debug("engine event stream", "state", s.State.String(), "seq", s.Seq)
	}
}

// Relaying is a worker's relay running on its own event-plane connection.
type Relaying struct {
	conn  *Conn
	relay *Relay
	stop  context.CancelFunc
	done  chan struct{}
}

// StartRelay opens the event plane as "tandem-worker-<rc.Worker>" (the
// embedded server first when cfg asks for one) and relays the engine's
// events to the model's subject until Close. The relay reads the engine's
// sockets as bound: a wildcard endpoint is dialled on loopback, which works
// even when the worker's record advertises a host name.
func StartRelay(ctx context.Context, cfg Config, rc RelayConfig) (*Relaying, error) {
	nc, err := Open(context.WithoutCancel(ctx), cfg, "tandem-worker-"+rc.Worker, rc.Board, rc.Logger)
	if err != nil {
		return nil, err
	}
	r := &Relaying{conn: nc}
	rc.Prefix, rc.Endpoint, rc.ReplayEndpoint = cfg.SubjectPrefix, loopback(rc.Endpoint), loopback(rc.ReplayEndpoint)
	if r.relay, err = NewRelay(nc.Conn, rc); err != nil {
		r.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	r.stop, r.done = cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		r.relay.Run(rctx)
	}()
	return r, nil
}

// Subject is where the relay publishes.
func (r *Relaying) Subject() string { return r.relay.Subject() }

// Close stops the relay, flushes what it published (a drain's last
// batches) and closes the connection.
func (r *Relaying) Close() {
	if r.stop != nil {
		r.stop()
		<-r.done
	}
	_ = r.conn.FlushTimeout(time.Second)
	r.conn.Close()
}

// loopback makes a wildcard ZMQ endpoint dialable from this host.
func loopback(endpoint string) string {
	if endpoint == "" {
		return ""
	}
	return discovery.AdvertiseURL(endpoint, "127.0.0.1")
}
