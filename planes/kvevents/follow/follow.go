package follow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/planes/kvevents"
	"github.com/tandemllm/tandem/planes/kvevents/event"
)

// BoundPrefix marks a worker endpoint that is a topic on the bound socket
// (Config.Listener or Config.Bind): "topic:NAME".
const BoundPrefix = "topic:"

// IngestFunc hands one worker's batch, with its sequence number, to the
// consumer (the router's kv policy Ingest); b is valid only during the call.
type IngestFunc = func(worker string, seq uint64, b *event.Batch) error

// Source feeds a consumer from an event plane other than per-worker ZMQ
// subscriptions (eventplane's NATS source): Follow is called before each
// worker of a model is added and subscribes once per model (a model already
// followed is left as it is); Close on shutdown.
type Source interface {
	Follow(ctx context.Context, model string, ingest IngestFunc) error
	Close() error
}

// Config configures a Follower. Zero values take kvevents' defaults.
type Config struct {
	// Topic is the KV event topic to subscribe to ("": all).
	Topic string
	// Listener is a bound socket (--kv-events-bind) that publishers dial
	// into; a worker whose endpoint is "topic:NAME" is followed on it under
	// that topic. The caller closes it.
	Listener *kvevents.Listener
	// Bind, when set and Listener is not, is the endpoint the Follower
	// binds its own Listener on (--kv-events-bind tcp://host:port), closed
	// with the Follower.
	Bind string
	// BindAllow lists the source networks a bound socket accepts
	// publishers from (--kv-events-allow); empty: Bind must be loopback
	// (kvevents.ListenAllow).
	BindAllow []netip.Prefix
	// ReplayTimeout and DialTimeout tune the subscribers.
	ReplayTimeout, DialTimeout time.Duration
	// Logger; nil is slog.Default().
	Logger *slog.Logger
	// Registerer receives the subscribers' and the bound socket's metrics;
	// nil registers nothing.
	Registerer prometheus.Registerer
}

// Follower runs the subscriptions of one consumer. It is safe for
// concurrent use.
type Follower struct {
	cfg      Config
	log      *slog.Logger
	met      *kvevents.SubscriberMetrics
	listener *kvevents.Listener
	own      bool // listener bound by Config.Bind, closed by Close

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	tokens map[string][]byte // worker id → replay token
}

// New returns a Follower whose subscriptions live until ctx ends or Close.
// With Config.Bind it binds the socket publishers dial into.
func New(ctx context.Context, cfg Config) (*Follower, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	f := &Follower{cfg: cfg, log: cfg.Logger, listener: cfg.Listener, tokens: map[string][]byte{}}
	var err error
	if f.met, err = kvevents.NewSubscriberMetrics(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("follow: %w", err)
	}
	f.ctx, f.cancel = context.WithCancel(ctx)
	if cfg.Listener == nil && cfg.Bind != "" {
		l, err := kvevents.ListenAllow(f.ctx, cfg.Bind, cfg.BindAllow, cfg.Logger)
		if err != nil {
			f.cancel()
			return nil, fmt.Errorf("router: --kv-events-bind: %w", err)
		}
		f.listener, f.own = l, true
		if err := registerBound(cfg.Registerer, l); err != nil {
			l.Close()
			f.cancel()
			return nil, err
		}
	}
	return f, nil
}

// registerBound registers what the bound socket sees of its publishers: how
// many are connected, and how many connections ended (a publisher restarted
// or gone). A worker whose publisher stays away raises kv_events_missing
// once it computes blocks.
func registerBound(reg prometheus.Registerer, l *kvevents.Listener) error {
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tandem_kvevents_bound_publishers",
			Help: "KV event publishers connected to the bound socket (--kv-events-bind)."},
			func() float64 { return float64(l.Connected()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tandem_kvevents_bound_disconnects_total",
			Help: "KV event publisher connections to the bound socket that ended."},
			func() float64 { return float64(l.Dropped()) }),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("router: register bound socket metrics: %w", err)
		}
	}
	return nil
}

// Listener is the bound socket (Config.Listener, or the one bound by
// Config.Bind); nil without one.
func (f *Follower) Listener() *kvevents.Listener { return f.listener }

// SetReplayToken gives the subscriber of worker id the token its
// publisher's replay socket asks for (kvevents.PublisherConfig.ReplayToken);
// nil forgets it. Call it before Follow.
func (f *Follower) SetReplayToken(id string, token []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if token == nil {
		delete(f.tokens, id)
		return
	}
	f.tokens[id] = token
}

func (f *Follower) replayToken(id string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokens[id]
}

// Follow subscribes to worker id's stream at endpoint (a PUB socket, or
// "topic:NAME" on the bound socket), with gap recovery through
// replayEndpoint if given, and feeds h from the subscription's goroutine
// until stop is called, ctx ends or Close. stop returns once h will not be
// called again, and forgets the worker's subscriber metrics.
func (f *Follower) Follow(id, endpoint, replayEndpoint string, h event.Handler) (stop func(), err error) {
	if endpoint == "" {
		return nil, errors.New("follow: empty endpoint")
	}
	scfg := kvevents.SubscriberConfig{
		Worker: id, Endpoint: endpoint, ReplayEndpoint: replayEndpoint, ReplayToken: f.replayToken(id), Topic: f.cfg.Topic,
		Handler: h, Logger: f.log, Metrics: f.met,
		ReplayTimeout: f.cfg.ReplayTimeout, DialTimeout: f.cfg.DialTimeout,
	}
	if topic, ok := strings.CutPrefix(endpoint, BoundPrefix); ok {
		if f.listener == nil {
			return nil, fmt.Errorf("router: worker %s: KV events %q need a bound socket (--kv-events-bind)", id, endpoint)
		}
		scfg.Listener, scfg.Topic, scfg.Endpoint = f.listener, topic, ""
	}
	sub, err := kvevents.NewSubscriber(scfg)
	if err != nil {
		return nil, fmt.Errorf("router: worker %s: %w", id, err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer close(done)
		sub.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
		f.met.Forget(id)
	}, nil
}

// Close stops every subscription, waits for their goroutines and closes the
// socket it bound.
func (f *Follower) Close() {
	f.cancel()
	f.wg.Wait()
	if f.own {
		f.listener.Close()
	}
}
