package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/zeebo/xxh3"

	"github.com/tandemllm/tandem/internal/backoff"
)

// SubscriberConfig configures one worker's subscription.
type SubscriberConfig struct {
	// Worker names the stream in logs and metrics.
	Worker string
	// Endpoint is the worker's PUB socket, e.g. "tcp://10.0.0.7:5557".
	Endpoint string
	// ReplayEndpoint is the worker's ROUTER replay socket; "" disables gap
	// recovery (every gap is then a loss).
	ReplayEndpoint string
	// Topic is the exact topic of the publisher's stream ("" receives
	// everything): the ZMQ subscription is its prefix, and messages whose
	// topic only starts with it are counted (result other_topic) and
	// ignored.
	Topic   string
	Handler Handler
	Logger  *slog.Logger
	// Metrics are shared by the subscribers of a process; nil disables them.
	Metrics *SubscriberMetrics
	// DialTimeout bounds connecting a socket (default 2 s).
	DialTimeout time.Duration
	// ReplayTimeout bounds one replay exchange (default 2 s).
	ReplayTimeout time.Duration
	// MinBackoff and MaxBackoff bound the reconnect delay, whose ceiling
	// doubles after each failure, jittered between MinBackoff and it
	// (defaults 10 ms and 5 s, Dynamo's bounds).
	MinBackoff, MaxBackoff time.Duration
	// ReplayToken, if set, is sent with every replay request: Tandem's
	// publishers with a token answer history only to requests carrying
	// it (PublisherConfig.ReplayToken).
	ReplayToken []byte
	// Listener, when set, is the bound socket the publisher dials into;
	// Endpoint is then only its name in logs, and Topic (required) is the
	// exact topic that tells this publisher's messages from the others'.
	Listener *Listener
}

// SubscriberMetrics count what subscribers see, labelled by worker.
type SubscriberMetrics struct {
	messages   *prometheus.CounterVec
	lost       *prometheus.CounterVec
	replays    *prometheus.CounterVec
	reconnects *prometheus.CounterVec
}

// NewSubscriberMetrics registers the subscriber metrics on reg (nil: not
// registered, still counted).
func NewSubscriberMetrics(reg prometheus.Registerer) (*SubscriberMetrics, error) {
	m := &SubscriberMetrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_kvevents_messages_total",
			Help: "KV event messages received, by worker and result (applied, duplicate, corrupt, other_topic).",
		}, []string{"worker", "result"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_kvevents_lost_batches_total",
			Help: "KV event batches lost for good (not recoverable through replay).",
		}, []string{"worker"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_kvevents_replays_total",
			Help: "Replay exchanges with a worker's ROUTER socket, by result (ok, failed).",
		}, []string{"worker", "result"}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_kvevents_reconnects_total",
			Help: "Times a worker's event subscription was (re)established.",
		}, []string{"worker"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.messages, m.lost, m.replays, m.reconnects} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("kvevents: register subscriber metrics: %w", err)
			}
		}
	}
	return m, nil
}

// Forget drops a departed worker's series.
func (m *SubscriberMetrics) Forget(worker string) {
	if m == nil {
		return
	}
	for _, v := range []*prometheus.CounterVec{m.messages, m.lost, m.replays, m.reconnects} {
		v.DeletePartialMatch(prometheus.Labels{"worker": worker})
	}
}

// Diagnostic codes of the subscriber's log lines.
const (
	CodeCorrupt      = "kv_event_corrupt"
	CodeLoss         = "kv_event_loss"
	CodeReplayFailed = "kv_event_replay_failed"
	CodeReset        = "kv_event_stream_reset"
)

// Subscriber follows one worker's event stream: a ZMQ SUB socket with its
// own reconnect loop, sequence tracking, and gap recovery through the
// worker's replay socket. It delivers batches to its Handler in order and
// reports every state change, so a consumer always knows whether its view
// of the engine's cache is complete.
type Subscriber struct {
	cfg SubscriberConfig
	log *slog.Logger

	dec   Decoder
	batch Batch

	// has is set once a batch was consumed; last is its seq and lastDigest
	// a hash of its payload, which lets a reconnect tell a publisher that
	// restarted (same seq, other content) from one that did not.
	has        bool
	last       uint64
	lastDigest uint64
	// dupFloor: live messages in [dupFloor, last] are duplicates of what a
	// replay already delivered; below it, a lower seq means a restart.
	dupFloor uint64
	// dupOpen: the duplicate window is open, from a replay until the first
	// live message in order. Past it a lower seq can only be a publisher
	// that restarted, which matters on a bound socket, where a restarted
	// publisher dials back into the same session.
	dupOpen  bool
	live     bool // a live message arrived in order in this session
	corrupts uint64
	// started is set once any batch was delivered. Before that the
	// subscription is new: it starts at whatever seq the publisher is at,
	// and what was published before it subscribed is not a loss (a router
	// or worker restart must not raise kv_events_lost). A publisher reset
	// later does not clear it: events of the new publisher that were
	// missed are a loss.
	started bool
	// first is the seq of the first batch delivered, and liveOnce is set
	// at the first StreamLive: that one reports MidStream when first > 0.
	first    uint64
	liveOnce bool
}

// NewSubscriber validates cfg; Run does the work.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	if cfg.Listener != nil && cfg.Topic == "" {
		return nil, fmt.Errorf("kvevents: subscriber for %q on a bound socket: no topic to tell its publisher apart", cfg.Worker)
	}
	if cfg.Listener != nil && cfg.Endpoint == "" {
		cfg.Endpoint = cfg.Listener.Endpoint()
	}
	if cfg.Endpoint == "" {
		return nil, fmt.Errorf("kvevents: subscriber for %q: no endpoint", cfg.Worker)
	}
	if cfg.Handler == nil {
		return nil, fmt.Errorf("kvevents: subscriber for %q: no handler", cfg.Worker)
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	if cfg.ReplayTimeout <= 0 {
		cfg.ReplayTimeout = 2 * time.Second
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 10 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(5*time.Second, cfg.MinBackoff)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Subscriber{cfg: cfg, log: log.With("component", "kvevents.subscriber", "worker", cfg.Worker)}, nil
}

// Run follows the stream until ctx ends. Connection errors are retried
// with backoff, never returned: a worker that is briefly unreachable must
// not need a supervisor.
func (s *Subscriber) Run(ctx context.Context) {
	// Jittered, so the subscribers of every frontend do not redial a
	// restarted worker in lockstep.
	bo := backoff.Backoff{Base: s.cfg.MinBackoff, Max: s.cfg.MaxBackoff}
	s.state(StreamStatus{State: StreamConnecting})
	failures := 0
	for ctx.Err() == nil {
		start := time.Now()
		err := s.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > s.cfg.MaxBackoff {
			bo.Reset() // it was up for a while: retry fast
			failures = 0
		}
		delay := bo.Next()
		// One WARN per outage; the retries of an unreachable worker go to
		// DEBUG (the router's kv_events_missing says it louder if it serves).
		level := slog.LevelDebug
		if failures == 0 {
			level = slog.LevelWarn
		}
		failures++
		s.log.Log(ctx, level, "KV event subscription down, reconnecting", "endpoint", s.cfg.Endpoint, "err", err, "retry_in", delay, "attempt", failures)
		s.state(StreamStatus{State: StreamConnecting, Err: err})
		if !backoff.Sleep(ctx, delay) {
			return
		}
	}
}

func (s *Subscriber) state(st StreamStatus) { s.cfg.Handler.HandleState(st) }

// session is one connection: dial, catch up, then consume live messages
// until an error.
func (s *Subscriber) session(ctx context.Context) error {
	if l := s.cfg.Listener; l != nil {
		return s.boundSession(ctx, l)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Automatic reconnection stays off: in zmq4 it redials from the
	// connection reaper without locking, racing with Close (llm-d #480).
	// This loop owns reconnection instead.
	sub := zmq4.NewSub(sctx, zmq4.WithAutomaticReconnect(false), zmq4.WithDialerMaxRetries(0),
		zmq4.WithDialerTimeout(s.cfg.DialTimeout))
	defer sub.Close()
	// Subscribe before dialing: zmq4 sends the subscription as soon as the
	// connection exists, which shortens the slow-joiner window.
	if err := sub.SetOption(zmq4.OptionSubscribe, s.cfg.Topic); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	if err := dialWithin(sctx, sub, s.cfg.Endpoint, s.cfg.DialTimeout); err != nil {
		return fmt.Errorf("dial %s: %w", s.cfg.Endpoint, err)
	}
	if m := s.cfg.Metrics; m != nil {
		m.reconnects.WithLabelValues(s.cfg.Worker).Inc()
	}
	s.live = false
	s.catchUp(ctx)
	s.state(StreamStatus{State: StreamSynced, Seq: s.last})
	for {
		msg, err := sub.Recv()
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		s.onLive(ctx, msg.Frames)
	}
}

// boundSession consumes the messages the listener routes to this topic.
func (s *Subscriber) boundSession(ctx context.Context, l *Listener) error {
	feed, err := l.attach(s.cfg.Topic)
	if err != nil {
		return err
	}
	defer l.detach(s.cfg.Topic, feed)
	if m := s.cfg.Metrics; m != nil {
		m.reconnects.WithLabelValues(s.cfg.Worker).Inc()
	}
	s.live = false
	s.catchUp(ctx)
	s.state(StreamStatus{State: StreamSynced, Seq: s.last})
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.done:
			return errors.New("listener closed")
		case frames := <-feed:
			s.onLive(ctx, frames)
		}
	}
}

// Listener is a SUB socket that binds (--kv-events-bind): publishers dial
// into it — vLLM whose endpoint names a host (it connects then), llm-d's
// simulators, Tandem engines with PublisherConfig.Dial — and are told
// apart by topic, each routed to its own Subscriber with its own sequence
// tracking and replay.
//
// One bound socket carries every publisher, so the loss of one connection
// must not stop the others: zmq4's SUB Recv reports a peer that went away
// as an error of the socket (its qreader forwards the connection's read
// error, msgio.go, then drops that connection) while the socket itself and
// its other connections stay up. The listener counts and logs such an
// error and keeps receiving; only its own Close (or ctx) ends it. A
// publisher that restarts dials in again and its subscriber sees the new
// sequence (StreamReset).
type Listener struct {
	sock   zmq4.Socket
	ep     string
	log    *slog.Logger
	done   chan struct{}
	guard  *guard
	ctx    context.Context
	cancel context.CancelFunc

	// dropped counts publisher connections that ended (receive errors
	// while the socket stays open).
	dropped atomic.Uint64

	mu      sync.Mutex
	feeds   map[string]chan [][]byte
	unknown map[string]bool // topics seen with no subscriber (logged once)
}

// feedDepth bounds the messages waiting for one subscriber; beyond it the
// listener drops, and the subscriber's sequence check recovers by replay.
const feedDepth = 4096

// Listen binds a SUB socket at endpoint (tcp://host:port; port 0 picks
// one) and routes messages by topic until ctx ends or Close. It binds
// loopback only: see ListenAllow.
func Listen(ctx context.Context, endpoint string, log *slog.Logger) (*Listener, error) {
	return ListenAllow(ctx, endpoint, nil, log)
}

// ListenAllow is Listen that accepts publishers from the allow networks
// only (guard.go): with none, the endpoint must be a loopback address and
// only loopback sources connect; with some, any bind address is allowed
// and connections from outside the list are closed at accept.
func ListenAllow(ctx context.Context, endpoint string, allow []netip.Prefix, log *slog.Logger) (*Listener, error) {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "kvevents.listener")
	bind, g, err := guardEndpoint(endpoint, allow, log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.WithValue(ctx, guardKey{}, g))
	sock := zmq4.NewSub(ctx, zmq4.WithAutomaticReconnect(false), zmq4.WithLogger(slog.NewLogLogger(log.Handler(), slog.LevelDebug)))
	if err := sock.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		sock.Close()
		cancel()
		return nil, fmt.Errorf("kvevents: subscribe: %w", err)
	}
	if err := sock.Listen(bind); err != nil {
		sock.Close()
		cancel()
		return nil, fmt.Errorf("kvevents: bind SUB %s: %w", endpoint, err)
	}
	l := &Listener{sock: sock, ep: endpointOf(sock, endpoint), log: log, done: make(chan struct{}), guard: g,
		ctx: ctx, cancel: cancel, feeds: map[string]chan [][]byte{}, unknown: map[string]bool{}}
	go l.recv()
	return l, nil
}

// Refused counts connections closed at accept because their source is
// not allowed.
func (l *Listener) Refused() uint64 { return l.guard.refused.Load() }

// Endpoint is the bound address with the actual port, for publishers.
func (l *Listener) Endpoint() string { return l.ep }

// Close stops the socket; subscribers on it reconnect until their context
// ends.
func (l *Listener) Close() error {
	l.cancel()
	return l.sock.Close()
}

// Dropped counts publisher connections that ended while the socket stayed
// open (each is reported by zmq4 as one receive error).
func (l *Listener) Dropped() uint64 { return l.dropped.Load() }

// Connected is how many publishers are connected now.
func (l *Listener) Connected() int64 { return l.guard.open.Load() }

func (l *Listener) recv() {
	defer close(l.done)
	for {
		msg, err := l.sock.Recv()
		if err != nil {
			if l.ctx.Err() != nil {
				return // closed
			}
			// One publisher's connection ended (zmq4 hands its read error
			// to Recv once, then drops the connection); the others, and
			// publishers that dial in later, keep flowing.
			n := l.dropped.Add(1)
			l.log.Info("a KV event publisher's connection ended; the bound socket keeps receiving from the others",
				"endpoint", l.ep, "err", err, "dropped_total", n, "connected", l.guard.open.Load())
			continue
		}
		if len(msg.Frames) == 0 {
			continue
		}
		topic := string(msg.Frames[0])
		l.mu.Lock()
		feed := l.feeds[topic]
		if feed == nil && !l.unknown[topic] && len(l.unknown) < 1024 {
			l.unknown[topic] = true
			l.log.Warn("KV events on the bound socket with a topic no worker claims; ignored", "topic", topic)
		}
		l.mu.Unlock()
		if feed == nil {
			continue
		}
		select {
		case feed <- msg.Frames:
		default: // the subscriber lags: its seq check sees the gap
		}
	}
}

func (l *Listener) attach(topic string) (chan [][]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.feeds[topic]; dup {
		return nil, fmt.Errorf("kvevents: topic %q already has a subscriber on %s", topic, l.ep)
	}
	feed := make(chan [][]byte, feedDepth)
	l.feeds[topic] = feed
	delete(l.unknown, topic)
	return feed, nil
}

func (l *Listener) detach(topic string, feed chan [][]byte) {
	l.mu.Lock()
	if l.feeds[topic] == feed {
		delete(l.feeds, topic)
	}
	l.mu.Unlock()
}

// dialWithin bounds Dial, whose ZMTP handshake has no timeout of its own: a
// peer that accepts TCP and then stays silent would hang it forever. On
// timeout the socket is closed and the dialing goroutine finishes when the
// peer or the kernel gives up.
func dialWithin(ctx context.Context, sock zmq4.Socket, ep string, d time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- sock.Dial(ep) }()
	t := time.NewTimer(d + time.Second)
	defer t.Stop()
	select {
	case err := <-errc:
		return err
	case <-t.C:
		sock.Close()
		return errors.New("timed out")
	case <-ctx.Done():
		sock.Close()
		return ctx.Err()
	}
}

// expected is the next seq the stream should deliver.
func (s *Subscriber) expected() uint64 {
	if !s.has {
		return 0
	}
	return s.last + 1
}

// catchUp replays what the publisher buffers from our position. After a
// reconnect it asks from the last consumed seq, to compare that batch's
// content: a match proves continuity, a mismatch (or nothing at all) means
// the publisher restarted.
func (s *Subscriber) catchUp(ctx context.Context) {
	s.dupFloor = s.expected()
	s.dupOpen = false
	if s.cfg.ReplayEndpoint == "" {
		return
	}
	from := s.expected()
	if s.has {
		from = s.last
	}
	entries, err := s.fetchReplay(ctx, from)
	if err != nil {
		s.log.Warn("KV event replay failed; continuing with live events", "diagnostic_code", CodeReplayFailed, "from", from, "err", err)
		return
	}
	if s.has {
		switch {
		case len(entries) == 0 || entries[0].seq < s.last ||
			(entries[0].seq == s.last && xxh3.Hash(entries[0].payload) != s.lastDigest):
			s.reset()
			if len(entries) == 0 || entries[0].seq != 0 {
				// Fetch the new publisher's stream from its start.
				if entries, err = s.fetchReplay(ctx, 0); err != nil {
					s.log.Warn("KV event replay failed after a publisher reset", "diagnostic_code", CodeReplayFailed, "err", err)
					return
				}
			}
		case entries[0].seq == s.last:
			entries = entries[1:] // verified; already consumed
		}
	}
	s.applyReplayed(entries)
	s.dupFloor = min(s.dupFloor, s.expected())
	s.dupOpen = true
}

// reset forgets the stream position after a publisher restart.
func (s *Subscriber) reset() {
	s.log.Warn("KV event publisher restarted; dropping what was known of its cache", "diagnostic_code", CodeReset, "last_seq", s.last)
	s.has, s.last, s.lastDigest, s.dupFloor, s.dupOpen = false, 0, 0, 0, false
	s.state(StreamStatus{State: StreamReset})
}

// applyReplayed delivers replayed batches in order, reporting a loss where
// the publisher's buffer no longer reaches back to what we need.
func (s *Subscriber) applyReplayed(entries []replayEntry) {
	for _, e := range entries {
		want := s.expected()
		switch {
		case e.seq < want:
			continue
		case e.seq > want && s.started:
			s.loss(want, e.seq, errors.New("no longer in the publisher's replay buffer"))
		}
		s.deliver(e.seq, e.payload)
	}
}

func (s *Subscriber) loss(want, got uint64, err error) {
	lost := got - want
	s.log.Error("KV events lost; the worker's cache view is incomplete", "diagnostic_code", CodeLoss,
		"expected_seq", want, "got_seq", got, "lost_batches", lost, "err", err)
	if m := s.cfg.Metrics; m != nil {
		m.lost.WithLabelValues(s.cfg.Worker).Add(float64(lost))
	}
	s.state(StreamStatus{State: StreamLoss, Seq: got, Lost: lost, Err: err})
}

// onLive handles one message from the SUB socket.
func (s *Subscriber) onLive(ctx context.Context, frames [][]byte) {
	seq, payload, ok := s.parseLive(frames)
	if !ok {
		return
	}
	want := s.expected()
	if !s.started && seq > want && s.cfg.ReplayEndpoint != "" {
		// The first live batch of a fresh subscription, past what catchUp
		// replayed: batches in between were published while the
		// subscription was taking effect. Ask again for what the
		// publisher buffers; what it no longer has predates us.
		s.catchUp(ctx)
		want = s.expected()
	}
	switch {
	case seq == want:
		s.dupOpen = false
	case s.has && seq < want && s.dupOpen && seq >= s.dupFloor:
		s.count("duplicate")
		return
	case s.has && seq < want:
		// Lower than anything this session replayed: a new publisher.
		s.reset()
		if seq > 0 {
			s.recoverGap(ctx, 0, seq)
		}
	case !s.started:
		// A new subscription joins the stream where it is: with no replay
		// socket, or one that no longer reaches back, what came before is
		// unknown. Not a loss (a subscriber that joins a running engine
		// never had it), but not a complete view either: the first
		// StreamLive says so (MidStream).
		s.log.Info("KV event subscription starts mid-stream; batches before it are unknown", "worker", s.cfg.Worker, "seq", seq)
	default: // seq > want
		s.recoverGap(ctx, want, seq)
	}
	if seq < s.expected() {
		s.count("duplicate") // a replay already delivered it
	} else {
		s.deliver(seq, payload)
	}
	if !s.live {
		s.live = true
		mid := !s.liveOnce && s.first > 0
		s.liveOnce = true
		s.state(StreamStatus{State: StreamLive, Seq: seq, MidStream: mid})
	}
}

// recoverGap fills [want, got) through the replay socket; what it cannot
// fill is reported as lost, and the stream continues from got.
func (s *Subscriber) recoverGap(ctx context.Context, want, got uint64) {
	if s.cfg.ReplayEndpoint == "" {
		s.loss(want, got, errors.New("no replay endpoint"))
		return
	}
	entries, err := s.fetchReplay(ctx, want)
	if err != nil {
		s.log.Warn("KV event replay failed", "diagnostic_code", CodeReplayFailed, "from", want, "err", err)
		s.loss(want, got, err)
		return
	}
	s.applyReplayed(entries)
	if s.expected() < got {
		s.loss(s.expected(), got, errors.New("replay ended before the gap was filled"))
	}
}

// parseLive validates a live message: [topic, seq (8 bytes BE), payload].
func (s *Subscriber) parseLive(frames [][]byte) (uint64, []byte, bool) {
	if len(frames) != 3 {
		s.corrupt(fmt.Errorf("%d frames, want 3", len(frames)))
		return 0, nil, false
	}
	if t := s.cfg.Topic; t != "" && string(frames[0]) != t {
		// ZMQ subscriptions match by prefix: "kv" also receives "kv-2".
		// The topic names one publisher's stream, so only an exact match
		// is this stream's; another's seq would read as a gap.
		s.count("other_topic")
		return 0, nil, false
	}
	if len(frames[1]) != 8 {
		s.corrupt(fmt.Errorf("sequence frame of %d bytes, want 8", len(frames[1])))
		return 0, nil, false
	}
	return binary.BigEndian.Uint64(frames[1]), frames[2], true
}

// corrupt logs a message that cannot even be placed in the sequence. It is
// skipped; if it carried events, the next message's seq reveals the gap.
func (s *Subscriber) corrupt(err error) {
	s.count("corrupt")
	// Powers of two: a broken peer stays visible without flooding the log.
	if s.corrupts++; s.corrupts&(s.corrupts-1) == 0 {
		s.log.Error("corrupt KV event message skipped", "diagnostic_code", CodeCorrupt, "err", err, "corrupt_total", s.corrupts)
	}
}

// deliver decodes and hands on the batch at seq, the next expected. A
// payload that does not decode is consumed (replaying it would return the
// same bytes) and reported as a loss of one batch.
func (s *Subscriber) deliver(seq uint64, payload []byte) {
	if !s.started {
		s.first = seq
	}
	s.has, s.started, s.last, s.lastDigest = true, true, seq, xxh3.Hash(payload)
	if err := s.dec.Decode(payload, &s.batch); err != nil {
		s.corrupt(err)
		s.state(StreamStatus{State: StreamLoss, Seq: seq, Lost: 1, Err: err})
		return
	}
	s.count("applied")
	s.cfg.Handler.HandleBatch(seq, &s.batch)
}

func (s *Subscriber) count(result string) {
	if m := s.cfg.Metrics; m != nil {
		m.messages.WithLabelValues(s.cfg.Worker, result).Inc()
	}
}

type replayEntry struct {
	seq     uint64
	payload []byte
}

// fetchReplay asks the ROUTER socket for every buffered batch from start
// and collects them until the end marker. Both reply layouts are accepted:
// [topic, seq, payload] (current vLLM) and [seq, payload] (SGLang, older
// vLLM), after the DEALER's empty delimiter frame.
func (s *Subscriber) fetchReplay(ctx context.Context, start uint64) (_ []replayEntry, err error) {
	defer func() {
		if m := s.cfg.Metrics; m != nil {
			r := "ok"
			if err != nil {
				r = "failed"
			}
			m.replays.WithLabelValues(s.cfg.Worker, r).Inc()
		}
	}()
	rctx, cancel := context.WithTimeout(ctx, s.cfg.ReplayTimeout)
	defer cancel()
	d := zmq4.NewDealer(rctx, zmq4.WithAutomaticReconnect(false), zmq4.WithDialerMaxRetries(0),
		zmq4.WithDialerTimeout(s.cfg.DialTimeout), zmq4.WithTimeout(s.cfg.ReplayTimeout))
	defer d.Close()
	if err := dialWithin(rctx, d, s.cfg.ReplayEndpoint, s.cfg.DialTimeout); err != nil {
		return nil, fmt.Errorf("dial replay %s: %w", s.cfg.ReplayEndpoint, err)
	}
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], start)
	frames := [][]byte{{}, req[:]}
	if len(s.cfg.ReplayToken) > 0 {
		frames = append(frames, s.cfg.ReplayToken)
	}
	if err := d.SendMulti(zmq4.NewMsgFrom(frames...)); err != nil {
		return nil, fmt.Errorf("send replay request: %w", err)
	}
	var out []replayEntry
	for {
		msg, err := d.Recv()
		if err != nil {
			return nil, fmt.Errorf("receive replay (after %d batches): %w", len(out), err)
		}
		seq, payload, err := parseReplay(msg.Frames)
		if err != nil {
			s.corrupt(fmt.Errorf("replay reply: %w", err))
			continue
		}
		if seq == EndSeq {
			return out, nil
		}
		if n := len(out); n > 0 && seq <= out[n-1].seq {
			continue // out of order: keep the stream monotonic
		}
		// Recv hands over fresh frames, so keeping payload is safe.
		out = append(out, replayEntry{seq, payload})
	}
}

func parseReplay(frames [][]byte) (uint64, []byte, error) {
	if len(frames) > 0 && len(frames[0]) == 0 {
		frames = frames[1:] // the DEALER's delimiter
	}
	switch len(frames) {
	case 3: // [topic, seq, payload]
		frames = frames[1:]
	case 2: // [seq, payload]
	default:
		return 0, nil, fmt.Errorf("%d frames", len(frames))
	}
	if len(frames[0]) != 8 {
		return 0, nil, fmt.Errorf("sequence frame of %d bytes", len(frames[0]))
	}
	return binary.BigEndian.Uint64(frames[0]), frames[1], nil
}
