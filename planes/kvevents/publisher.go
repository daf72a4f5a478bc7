package kvevents

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tandemllm/tandem/internal/connlimit"
)

// Defaults of vLLM's KVEventsConfig.
const (
	DefaultEndpoint     = "tcp://*:5557"
	DefaultBufferSteps  = 10_000
	DefaultHWM          = 100_000
	DefaultMaxQueueSize = 100_000
)

// EndSeq is the sequence number of the replay end marker ((-1) as 8 bytes).
const EndSeq = ^uint64(0)

// PublisherConfig mirrors vLLM's KVEventsConfig for the zmq publisher.
type PublisherConfig struct {
	// Endpoint is where the PUB socket binds, e.g. "tcp://*:5557" or
	// "tcp://127.0.0.1:0" (0 picks a free port; see Publisher.Endpoint).
	// Unlike vLLM, which connects when the host is not a wildcard, Tandem
	// always binds: its engines are the servers.
	Endpoint string
	// ReplayEndpoint is where the ROUTER replay socket binds; "" disables
	// replay.
	ReplayEndpoint string
	// Topic is the first frame of every message ("" in vLLM by default).
	Topic string
	// BufferSteps is how many recent batches replay can serve (default 10000).
	BufferSteps int
	// HWM bounds the socket's send queue (default 100000).
	HWM int
	// MaxQueueSize bounds batches waiting for the sender goroutine (default
	// 100000); beyond it Publish drops.
	MaxQueueSize int
	// LegacyReplay answers replay requests with the older 2-frame layout
	// [seq, payload] (SGLang, old vLLM) instead of [topic, seq, payload].
	LegacyReplay bool
	// DataParallelRank is stamped on batches published with PublishBatch that
	// carry none, as vLLM's publisher does.
	DataParallelRank int
	// Dial connects the PUB socket to Endpoint, a subscriber that binds
	// (`tandem serve --kv-events-bind`), instead of binding it. vLLM does
	// the same when the endpoint's host is not a wildcard
	// (vllm/distributed/kv_events.py, ZmqEventPublisher: bind for "*",
	// connect otherwise), and llm-d's tooling binds one SUB for a fleet.
	// The dial is retried until it succeeds or the publisher closes; a
	// later drop is not redialed (zmq4's automatic redial races with Close).
	Dial bool
	// FirstSeq is the first batch's sequence number (vLLM: 0; some
	// look-alikes number from 1).
	FirstSeq uint64
	// GuardReplay puts the replay ROUTER behind the same source guard as
	// a bound SUB (guard.go): set when the batches carry token ids, i.e.
	// prompts. The endpoint must then be a loopback address unless
	// ReplayAllow names the networks routers connect from
	// (--kv-events-replay-allow); a connection from elsewhere is closed at
	// accept, before the ZMTP handshake.
	GuardReplay bool
	ReplayAllow []netip.Prefix
	// ReplayToken, if set, is what a replay request must carry as a
	// fourth frame ([identity, "", start_seq, token]) to be answered with
	// history: a request without it proves no router role and gets only
	// the end marker, i.e. nothing older than its own subscription.
	ReplayToken []byte
	// ReplayLimits cap the guarded replay socket's connections
	// (internal/connlimit; zero: DefaultReplayLimits). A replay exchange
	// is one short connection, so the handshake bound is its whole life.
	ReplayLimits connlimit.Limits
	// ConnMetrics carry the replay socket's connection series (nil:
	// unregistered).
	ConnMetrics *connlimit.Metrics
	Logger      *slog.Logger
}

// PlaneReplay names the replay socket in connection metrics.
const PlaneReplay = "kv-events-replay"

// DefaultReplayLimits bound the replay socket: routers open one short
// connection per replay exchange.
func DefaultReplayLimits() connlimit.Limits {
	return connlimit.Limits{MaxConns: 64, MaxPerSource: 16, Handshake: 10 * time.Second}
}

type ringEntry struct {
	seq     uint64
	payload []byte
}

// Publisher sends event batches on a ZMQ PUB socket and serves replays.
type Publisher struct {
	cfg    PublisherConfig
	log    *slog.Logger
	topic  []byte
	ctx    context.Context
	cancel context.CancelFunc
	pub    zmq4.Socket
	router zmq4.Socket

	mu       sync.Mutex
	queue    [][]byte
	closing  bool
	notify   chan struct{}
	stop     chan struct{}
	sendDone chan struct{}
	wg       sync.WaitGroup // replay server

	ringMu sync.Mutex
	ring   []ringEntry // grows to BufferSteps, then wraps at ringAt
	ringAt int

	nextSeq atomic.Uint64
	dropped atomic.Uint64
	sendErr atomic.Uint64

	replayGuard   *guard        // nil: replay unguarded
	replayRefused atomic.Uint64 // requests without the replay token
}

// NewPublisher binds the sockets and starts the sender (and replay server).
// The sockets live until Close or until ctx ends.
func NewPublisher(ctx context.Context, cfg PublisherConfig) (*Publisher, error) {
	if cfg.Endpoint == "" {
		cfg.Endpoint = DefaultEndpoint
	}
	if cfg.BufferSteps <= 0 {
		cfg.BufferSteps = DefaultBufferSteps
	}
	if cfg.HWM <= 0 {
		cfg.HWM = DefaultHWM
	}
	if cfg.MaxQueueSize <= 0 {
		cfg.MaxQueueSize = DefaultMaxQueueSize
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &Publisher{
		cfg:      cfg,
		log:      log.With("component", "kvevents.publisher"),
		topic:    []byte(cfg.Topic),
		ctx:      ctx,
		cancel:   cancel,
		notify:   make(chan struct{}, 1),
		stop:     make(chan struct{}),
		sendDone: make(chan struct{}),
	}
	// Automatic reconnection stays off (the zmq4 default): it races with
	// Close, and a binding socket never dials anyway. The library's own
	// complaints (a peer failing the ZMTP handshake, say) go to our logger
	// at debug level instead of stderr.
	zlog := zmq4.WithLogger(slog.NewLogLogger(p.log.Handler(), slog.LevelDebug))
	p.pub = zmq4.NewPub(ctx, zmq4.WithAutomaticReconnect(false), zlog)
	if err := p.pub.SetOption(zmq4.OptionHWM, cfg.HWM); err != nil {
		cancel()
		p.pub.Close()
		return nil, fmt.Errorf("kvevents: set HWM: %w", err)
	}
	p.nextSeq.Store(cfg.FirstSeq)
	if cfg.Dial {
		go p.dial()
	} else if err := p.pub.Listen(cfg.Endpoint); err != nil {
		cancel()
		p.pub.Close()
		return nil, fmt.Errorf("kvevents: bind PUB %s: %w", cfg.Endpoint, err)
	}
	if cfg.ReplayEndpoint != "" {
		rctx, bind := ctx, cfg.ReplayEndpoint
		if cfg.GuardReplay {
			b, g, err := guardReplay(cfg.ReplayEndpoint, cfg.ReplayAllow, p.log)
			if err != nil {
				cancel()
				p.pub.Close()
				return nil, err
			}
			lim := cfg.ReplayLimits
			if lim == (connlimit.Limits{}) {
				lim = DefaultReplayLimits()
			}
			g.lim, g.plane, g.connMetrics = &lim, PlaneReplay, cfg.ConnMetrics
			rctx, bind, p.replayGuard = context.WithValue(ctx, guardKey{}, g), b, g
		}
		p.router = zmq4.NewRouter(rctx, zmq4.WithAutomaticReconnect(false), zlog)
		if err := p.router.Listen(bind); err != nil {
			cancel()
			p.pub.Close()
			p.router.Close()
			return nil, fmt.Errorf("kvevents: bind replay ROUTER %s: %w", cfg.ReplayEndpoint, err)
		}
		p.wg.Add(1)
		go p.serveReplay()
	}
	go p.sendLoop()
	return p, nil
}

// Endpoint returns the bound PUB address with the actual port, for
// subscribers to dial (with Dial: the subscriber's address).
func (p *Publisher) Endpoint() string {
	if p.cfg.Dial {
		return p.cfg.Endpoint
	}
	return endpointOf(p.pub, p.cfg.Endpoint)
}

// dial connects the PUB socket to a binding subscriber, retrying with
// backoff until it succeeds or the publisher closes. Batches published
// before the connection exists are dropped by the socket (ZMQ PUB) and
// stay in the replay ring.
func (p *Publisher) dial() {
	backoff := 10 * time.Millisecond
	for p.ctx.Err() == nil {
		err := p.pub.Dial(p.cfg.Endpoint)
		if err == nil {
			p.log.Debug("KV event publisher connected", "endpoint", p.cfg.Endpoint)
			return
		}
		p.log.Debug("KV event publisher cannot reach its subscriber yet", "endpoint", p.cfg.Endpoint, "err", err)
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// guardReplay is guardEndpoint for the replay ROUTER, with its own flag
// in the refusal.
func guardReplay(endpoint string, allow []netip.Prefix, log *slog.Logger) (string, *guard, error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return "", nil, fmt.Errorf("kvevents: replay endpoint %q: want tcp://host:port", endpoint)
	}
	host, _, err := net.SplitHostPort(rest)
	if err != nil {
		return "", nil, fmt.Errorf("kvevents: replay endpoint %q: %w", endpoint, err)
	}
	if len(allow) == 0 && !isLoopbackHost(host) {
		return "", nil, fmt.Errorf("kvevents: refusing to bind the KV event replay socket on %s, reachable from other hosts, without --kv-events-replay-allow CIDR: it hands out past batches, whose token ids are prompts (or publish hashes only: --kv-events-token-ids=false)", endpoint)
	}
	return guardEndpoint(endpoint, allow, log)
}

// ReplayRefused counts replay connections closed at accept (source not
// allowed) and requests answered with nothing for want of the token.
func (p *Publisher) ReplayRefused() uint64 {
	n := p.replayRefused.Load()
	if p.replayGuard != nil {
		n += p.replayGuard.refused.Load()
	}
	return n
}

// ReplayEndpoint returns the bound replay address ("" without replay).
func (p *Publisher) ReplayEndpoint() string {
	if p.router == nil {
		return ""
	}
	return endpointOf(p.router, p.cfg.ReplayEndpoint)
}

func endpointOf(s zmq4.Socket, configured string) string {
	a := s.Addr()
	if a == nil {
		return configured
	}
	return a.Network() + "://" + a.String()
}

// PublisherStats counts the publisher's work.
type PublisherStats struct {
	Published uint64 // batches given sequence numbers and sent (the next sequence number)
	Dropped   uint64 // batches dropped because the queue was full
	SendErrs  uint64 // batches the socket refused
}

// Stats returns the publisher's counters.
func (p *Publisher) Stats() PublisherStats {
	return PublisherStats{Published: p.nextSeq.Load(), Dropped: p.dropped.Load(), SendErrs: p.sendErr.Load()}
}

// Publish queues an encoded batch and never blocks. The publisher takes
// ownership of payload (it is kept for replay). It returns false when the
// batch was dropped: queue full or publisher closed.
func (p *Publisher) Publish(payload []byte) bool {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return false
	}
	if len(p.queue) >= p.cfg.MaxQueueSize {
		p.mu.Unlock()
		// Log on powers of two so a sustained overload stays visible
		// without flooding the log.
		if n := p.dropped.Add(1); n&(n-1) == 0 {
			p.log.Warn("KV event queue full, dropping batch", "dropped_total", n, "max_queue_size", p.cfg.MaxQueueSize)
		}
		return false
	}
	p.queue = append(p.queue, payload)
	p.mu.Unlock()
	select {
	case p.notify <- struct{}{}:
	default:
	}
	return true
}

// PublishBatch encodes b in format f and publishes it, stamping the
// configured data-parallel rank when b has none and the current time when
// b.TS is zero.
func (p *Publisher) PublishBatch(b *Batch, f Format) bool {
	if !b.DataParallelRank.Valid {
		b.DataParallelRank = Int(int64(p.cfg.DataParallelRank))
	}
	if b.TS == 0 {
		b.TS = float64(time.Now().UnixNano()) / 1e9
	}
	return p.Publish(EncodeBatch(b, f))
}

// Close flushes queued batches (waiting at most a few seconds), then closes
// the sockets. It is idempotent. zmq4 v0.17 never stops its PUB writer
// goroutine, so each closed Publisher leaves one parked goroutine behind
// (no CPU, a few KiB); there is no handle to stop it from outside.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return nil
	}
	p.closing = true
	p.mu.Unlock()
	close(p.stop)
	select {
	case <-p.sendDone:
	case <-time.After(5 * time.Second):
	}
	p.cancel()
	err := ignoreClosed(p.pub.Close())
	if p.router != nil {
		err = errors.Join(err, ignoreClosed(p.router.Close()))
	}
	<-p.sendDone
	p.wg.Wait() // replay server exits once its socket is closed
	return err
}

// ignoreClosed drops net.ErrClosed from a socket's Close: the ZMQ library
// closes every peer connection, and one whose peer already hung up (a
// subscriber that left first) reports "use of closed network connection",
// which at shutdown loses nothing.
func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (p *Publisher) sendLoop() {
	defer close(p.sendDone)
	var batch [][]byte
	for {
		stopping := false
		select {
		case <-p.notify:
		case <-p.stop:
			stopping = true
		case <-p.ctx.Done():
			return
		}
		p.mu.Lock()
		batch, p.queue = p.queue, batch[:0]
		p.mu.Unlock()
		for i, payload := range batch {
			p.send(payload)
			batch[i] = nil
		}
		if stopping {
			p.mu.Lock()
			rest := p.queue
			p.queue = nil
			p.mu.Unlock()
			for _, payload := range rest {
				p.send(payload)
			}
			return
		}
	}
}

func (p *Publisher) send(payload []byte) {
	seq := p.nextSeq.Load()
	// Count and buffer the batch before it hits the wire, so a subscriber
	// that received seq n sees Stats().Published > n and can replay n.
	p.ringMu.Lock()
	if len(p.ring) < p.cfg.BufferSteps {
		p.ring = append(p.ring, ringEntry{seq, payload})
	} else {
		p.ring[p.ringAt] = ringEntry{seq, payload}
		p.ringAt = (p.ringAt + 1) % len(p.ring)
	}
	p.ringMu.Unlock()
	p.nextSeq.Store(seq + 1)
	seqFrame := binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq)
	if err := p.pub.SendMulti(zmq4.NewMsgFrom(p.topic, seqFrame, payload)); err != nil {
		if n := p.sendErr.Add(1); n&(n-1) == 0 {
			p.log.Warn("KV event send failed", "seq", seq, "err", err, "errors_total", n)
		}
	}
}

// replaySince returns buffered batches with seq >= start, oldest first.
func (p *Publisher) replaySince(start uint64) []ringEntry {
	p.ringMu.Lock()
	defer p.ringMu.Unlock()
	var out []ringEntry
	n := len(p.ring)
	for i := range n {
		e := p.ring[(p.ringAt+i)%n]
		if e.seq >= start {
			out = append(out, e)
		}
	}
	return out
}

func (p *Publisher) serveReplay() {
	defer p.wg.Done()
	end := make([]byte, 8)
	binary.BigEndian.PutUint64(end, EndSeq)
	for {
		msg, err := p.router.Recv()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			p.log.Debug("replay receive failed", "err", err)
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		// ROUTER sees [identity, "", start_seq] (and Tandem's routers add
		// the replay token); anything else is not a replay request (vLLM
		// ignores it too).
		if (len(msg.Frames) != 3 && len(msg.Frames) != 4) || len(msg.Frames[2]) != 8 {
			p.log.Debug("ignoring malformed replay request", "frames", len(msg.Frames))
			continue
		}
		id := msg.Frames[0]
		start := binary.BigEndian.Uint64(msg.Frames[2])
		var history []ringEntry
		if tok := p.cfg.ReplayToken; len(tok) > 0 && (len(msg.Frames) != 4 || subtle.ConstantTimeCompare(msg.Frames[3], tok) != 1) {
			if p.replayRefused.Add(1) == 1 {
				p.log.Warn("a KV event replay request without the replay token gets no history (it carries prompts)")
			}
		} else {
			history = p.replaySince(start)
		}
		for _, e := range history {
			var sb [8]byte
			binary.BigEndian.PutUint64(sb[:], e.seq)
			var reply zmq4.Msg
			if p.cfg.LegacyReplay {
				reply = zmq4.NewMsgFrom(id, nil, sb[:], e.payload)
			} else {
				reply = zmq4.NewMsgFrom(id, nil, p.topic, sb[:], e.payload)
			}
			if err := p.router.SendMulti(reply); err != nil {
				p.log.Debug("replay send failed", "err", err)
				break
			}
		}
		var marker zmq4.Msg
		if p.cfg.LegacyReplay {
			marker = zmq4.NewMsgFrom(id, nil, end, nil)
		} else {
			marker = zmq4.NewMsgFrom(id, nil, nil, end, nil)
		}
		if err := p.router.SendMulti(marker); err != nil {
			p.log.Debug("replay end marker failed", "err", err)
		}
	}
}

// OffsetEndpointPort is vLLM's offset_endpoint_port: for tcp endpoints the
// port grows by offset (how data-parallel ranks, and Tandem's in-process
// workers, get distinct ports); inproc endpoints get a "_dp<offset>" suffix;
// offset 0 and other transports are unchanged.
func OffsetEndpointPort(endpoint string, offset int) (string, error) {
	if offset == 0 {
		return endpoint, nil
	}
	switch {
	case strings.HasPrefix(endpoint, "inproc://"):
		return endpoint + "_dp" + strconv.Itoa(offset), nil
	case strings.HasPrefix(endpoint, "tcp://"):
		host, port, err := net.SplitHostPort(strings.TrimPrefix(endpoint, "tcp://"))
		if err != nil {
			return "", fmt.Errorf("kvevents: endpoint %q: %w", endpoint, err)
		}
		n, err := strconv.Atoi(port)
		if err != nil {
			return "", fmt.Errorf("kvevents: endpoint %q has no numeric port: %w", endpoint, err)
		}
		if n == 0 {
			return endpoint, nil // ephemeral ports are distinct anyway
		}
		return "tcp://" + net.JoinHostPort(host, strconv.Itoa(n+offset)), nil
	}
	return endpoint, nil
}
