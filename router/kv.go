package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/kvcache"
	"github.com/tandemllm/tandem/planes/kvevents/event"
	"github.com/tandemllm/tandem/router/accuracy"
	"github.com/tandemllm/tandem/router/kvindex"
)

// OnMissing says what kv mode does with a worker whose KV events are missing.
type OnMissing string

const (
	// MissingFallback routes the worker by approximation (its own routing
	// decisions) until events flow. The default.
	MissingFallback OnMissing = "fallback"
	// MissingFail stops routing to the worker until events flow; requests
	// fail with ErrKVEventsMissing if no other worker is left.
	MissingFail OnMissing = "fail"
)

// ParseOnMissing parses the --on-missing-kv-events flag.
func ParseOnMissing(s string) (OnMissing, error) {
	switch OnMissing(s) {
	case "", MissingFallback:
		return MissingFallback, nil
	case MissingFail:
		return MissingFail, nil
	}
	return "", fmt.Errorf("router: unknown --on-missing-kv-events %q (want fallback or fail)", s)
}

// ErrKVEventsMissing is returned by kv mode with --on-missing-kv-events=fail
// when every candidate's events are missing.
var ErrKVEventsMissing = errors.New("KV events missing from every candidate worker")

// Diagnostic codes raised on the health board.
const (
	DiagKVEventsMissing    = "kv_events_missing"
	DiagKVEventsRecovered  = "kv_events_recovered"
	DiagKVBlockSize        = "kv_block_size_mismatch"
	DiagKVEventsLost       = "kv_events_lost"
	DiagKVEventsRebuilt    = "kv_events_rebuilt"
	DiagPredictionDrift    = accuracy.DiagPredictionDrift
	DiagPredictionRecovery = accuracy.DiagPredictionRecovery
)

// Defaults of KVConfig.
const (
	DefaultKVBlockSize      = 16
	DefaultOverlapWeight    = 1.0
	DefaultApproxTTL        = 120 * time.Second
	DefaultApproxMaxBlocks  = 1 << 20
	DefaultKVEventsTimeout  = 5 * time.Second
	DefaultDriftWindow      = accuracy.DefaultWindow
	DefaultDriftThreshold   = accuracy.DefaultThreshold
	defaultDriftRecoverRate = accuracy.DefaultRecoverRate
)

// KVConfig configures the kv and kv-approx policies. Zero values take the
// defaults above; each field is a flag of cmd/tandem.
type KVConfig struct {
	// BlockSize is the router's block size in tokens (--router-block-size).
	// Every engine's block size must be a multiple of it; a worker whose is
	// not is refused for event routing (diagnostic kv_block_size_mismatch)
	// and tracked by approximation.
	BlockSize int
	// OverlapWeight is w in w·prefill_blocks + decode_blocks
	// (--router-kv-overlap-weight) of the weighted costs (tandem, dynamo,
	// and the ttft cost's fallback). 0 ignores the cache entirely.
	OverlapWeight float64
	// Temperature > 0 samples workers from a softmax of the costs instead of
	// taking the cheapest (--router-temperature).
	Temperature float64
	// Cost selects the cost function (--router-cost).
	Cost CostModel
	// IndexMaxBlocks bounds the event index's residences (worker, block)
	// (--index-max-blocks); least recently used are pruned first.
	IndexMaxBlocks int
	// ApproxTTL is how long a routing decision is remembered by the
	// approximate index (--router-ttl).
	ApproxTTL time.Duration
	// ApproxMaxBlocks bounds the approximate index.
	ApproxMaxBlocks int
	// KVEventsTimeout is how long a worker that computed full blocks may go
	// without publishing BlockStored before kv_events_missing is raised
	// (--kv-events-timeout).
	KVEventsTimeout time.Duration
	// OnMissing is what happens to such a worker (--on-missing-kv-events).
	OnMissing OnMissing
	// RebuildWindow is how long a worker whose events were lost is routed
	// with its approximate records as well, while new events rebuild its
	// index. 0 selects ApproxTTL, after which those records are gone anyway.
	RebuildWindow time.Duration
	// Streams follows the workers' event streams in kv mode
	// (planes/kvevents/follow.Follower); the policy closes it with Close. nil:
	// only in-process workers (Ingest) feed the index, and AddWorker
	// refuses an endpoint.
	Streams Streams
	// Topic, Bind, BindAllow, ReplayTimeout and DialTimeout are the
	// settings of the event follower (planes/kvevents/follow.Config), which the
	// assembly builds from them and hands over as Streams; the policy
	// itself reads none of them.
	//
	// Topic is the KV event topic to subscribe to ("": all).
	Topic string
	// Bind is the endpoint the follower binds for publishers that dial in
	// (--kv-events-bind tcp://host:port); a worker whose endpoint is
	// "topic:NAME" is followed on it under that topic.
	Bind string
	// BindAllow lists the source networks a bound socket accepts
	// publishers from (--kv-events-allow); empty: Bind must be loopback.
	BindAllow []netip.Prefix
	// DriftWindow and DriftThreshold: kv_prediction_drift is raised for a
	// worker when fewer than DriftThreshold of its last DriftWindow
	// predictions were within one block of the engine's cached_tokens.
	DriftWindow    int
	DriftThreshold float64
	// Seed seeds tie-breaking and softmax sampling; 0 draws a random seed.
	Seed uint64

	// Board receives diagnostics; nil creates a private one (tests).
	Board *health.Board
	// Logger; nil is slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// ReplayTimeout and DialTimeout tune the event subscribers (defaults
	// in kvevents).
	ReplayTimeout, DialTimeout time.Duration
}

// Streams follows workers' KV event streams for the kv policy. The policy
// declares it so that it links no transport; planes/kvevents/follow.Follower is
// the implementation.
type Streams interface {
	// Follow feeds h with worker's stream at endpoint (replayEndpoint, if
	// not empty, fills gaps) until stop is called; stop returns once h
	// will not be called again.
	Follow(worker, endpoint, replayEndpoint string, h event.Handler) (stop func(), err error)
	// SetReplayToken sets the token worker's replay socket asks for (nil:
	// none).
	SetReplayToken(worker string, token []byte)
	// Close stops every stream.
	Close()
}

func (c KVConfig) withDefaults() (KVConfig, error) {
	if c.BlockSize == 0 {
		c.BlockSize = DefaultKVBlockSize
	}
	if c.OverlapWeight == 0 {
		c.OverlapWeight = DefaultOverlapWeight
	}
	if c.OverlapWeight < 0 {
		c.OverlapWeight = 0 // an explicit "ignore the cache"
	}
	if c.Cost == "" {
		c.Cost = CostTTFT
	}
	if c.ApproxTTL == 0 {
		c.ApproxTTL = DefaultApproxTTL
	}
	if c.ApproxMaxBlocks == 0 {
		c.ApproxMaxBlocks = DefaultApproxMaxBlocks
	}
	if c.KVEventsTimeout == 0 {
		c.KVEventsTimeout = DefaultKVEventsTimeout
	}
	if c.OnMissing == "" {
		c.OnMissing = MissingFallback
	}
	if c.RebuildWindow == 0 {
		c.RebuildWindow = c.ApproxTTL
	}
	if c.DriftWindow == 0 {
		c.DriftWindow = DefaultDriftWindow
	}
	if c.DriftThreshold == 0 {
		c.DriftThreshold = DefaultDriftThreshold
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Board == nil {
		c.Board = health.NewBoard(c.Logger, nil)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	switch {
	case c.BlockSize < 1:
		return c, fmt.Errorf("router: block size %d must be positive", c.BlockSize)
	case c.Temperature < 0:
		return c, fmt.Errorf("router: temperature %v must not be negative", c.Temperature)
	case c.ApproxTTL < 0 || c.KVEventsTimeout < 0 || c.RebuildWindow < 0:
		return c, errors.New("router: durations must not be negative")
	case c.Cost != CostTTFT && c.Cost != CostTandem && c.Cost != CostDynamo:
		return c, fmt.Errorf("router: unknown cost model %q (want %s)", c.Cost, CostModels)
	case c.OnMissing != MissingFallback && c.OnMissing != MissingFail:
		return c, fmt.Errorf("router: unknown on-missing mode %q", c.OnMissing)
	}
	return c, nil
}

// KV is the KV-aware policy: the kv mode (an index fed by the workers' KV
// events, with approximation wherever events are not trustworthy) and the
// kv-approx mode (the router's own decisions only). It implements Policy and
// Observer; the lead wires workers in and out with AddWorker and
// RemoveWorker.
type KV struct {
	cfg  KVConfig
	name string
	cost cost
	// events holds every tier's residences, each node with its tier
	// (kvindex.Index.LookupTiers splits a worker's hit into pool, host
	// and disk blocks). nil in kv-approx.
	events *kvindex.Index
	// anyTiered: some worker has published a block below its pool (or
	// shares a lower tier), so decisions split hits by tier.
	anyTiered atomic.Bool
	approx    *kvindex.Index
	active    *activeTracker
	met       *kvMetrics
	log       *slog.Logger
	board     *health.Board

	mu      sync.RWMutex
	workers map[string]*kvWorker
	slots   []*kvWorker // by slot; nil when free
	free    []int
	flights map[*Request]*flight
	closed  bool

	// timings holds each worker's timing source (WorkerAdded), kept
	// across AddWorker's re-registration; guarded by mu.
	timings map[string]Worker
	// drifting counts workers in ttft_model_drift, so that decisions look
	// for them only while there are some.
	drifting atomic.Int32
	// fleetCoef is the latest TTFT rates learned from any worker.
	fleetCoef atomic.Pointer[ttftCoef]
	// externals counts workers whose engine reports its own queue
	// (kv_external.go); typical prices a request it reports waiting.
	externals atomic.Int32
	typical   typicalPrefill

	// decideMu serializes the load-dependent part of a decision.
	decideMu sync.Mutex

	rngMu  sync.Mutex
	rng    *rand.Rand
	rotate uint64 // tie rotation of the tandem cost

	pool      sync.Pool // *pickScratch
	lastSweep time.Time // approx expiry, guarded by mu
	// The last candidate list resolved, guarded by mu; invalidated
	// whenever a worker is added or removed.
	lastIDs []string
	lastWs  []*kvWorker
	gen     uint64 // bumped when a worker comes or goes
}

// NewKV returns the kv policy. It owns cfg.Streams: the streams AddWorker
// follows live until Close, or until the context the follower was built
// with ends (the policy itself starts no goroutine, so ctx bounds nothing
// of its own).
func NewKV(ctx context.Context, cfg KVConfig) (*KV, error) { return newKV(ctx, cfg, true) }

// NewKVApprox returns the kv-approx policy: no events, the router records
// its own decisions for ApproxTTL.
func NewKVApprox(ctx context.Context, cfg KVConfig) (*KV, error) { return newKV(ctx, cfg, false) }

func newKV(ctx context.Context, cfg KVConfig, events bool) (_ *KV, err error) {
	if streams := cfg.Streams; streams != nil {
		// The policy owns its follower: closed on error here, by Close
		// otherwise; kv-approx follows no stream.
		defer func() {
			if err != nil || !events {
				streams.Close()
			}
		}()
	}
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if !events {
		cfg.Streams = nil
	}
	k := &KV{
		cfg:     cfg,
		name:    "kv-approx",
		log:     cfg.Logger.With("component", "router.kv"),
		board:   cfg.Board,
		workers: map[string]*kvWorker{},
		flights: map[*Request]*flight{},
		timings: map[string]Worker{},
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
	}
	if k.cost, err = newCost(cfg.Cost); err != nil {
		return nil, err
	}
	k.approx, err = kvindex.New(kvindex.Config{Name: "approx", BlockSize: cfg.BlockSize, MaxBlocks: cfg.ApproxMaxBlocks,
		TTL: cfg.ApproxTTL, Now: cfg.Now, Registerer: cfg.Registerer})
	if err != nil {
		return nil, fmt.Errorf("router: approximate index: %w", err)
	}
	if events {
		k.name = "kv"
		// Blocks a worker offloaded to host memory or disk still match
		// there: onboarding them is a copy, not a recompute.
		k.events, err = kvindex.New(kvindex.Config{Name: "events", BlockSize: cfg.BlockSize, MaxBlocks: cfg.IndexMaxBlocks,
			Now: cfg.Now, Registerer: cfg.Registerer, LowerTiers: true})
		if err != nil {
			return nil, fmt.Errorf("router: event index: %w", err)
		}
	}
	k.active = newActiveTracker()
	if k.met, err = newKVMetrics(cfg.Registerer, k.name); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	return k, nil
}

// Name implements Policy.
func (k *KV) Name() string { return k.name }

// Config returns the effective configuration.
func (k *KV) Config() KVConfig { return k.cfg }

// Close stops every subscription and timer. The policy stays usable for
// routing (by approximation) but follows no stream.
func (k *KV) Close() {
	k.mu.Lock()
	k.closed = true
	ws := make([]*kvWorker, 0, len(k.workers))
	for _, w := range k.workers {
		ws = append(ws, w)
	}
	k.mu.Unlock()
	for _, w := range ws {
		w.stopTimer()
	}
	if k.cfg.Streams != nil {
		k.cfg.Streams.Close()
	}
}

// SetReplayToken gives the subscriber of worker id the token its
// publisher's replay socket asks for (kvevents.PublisherConfig.ReplayToken);
// call it before AddWorker. Without Streams it does nothing.
func (k *KV) SetReplayToken(id string, token []byte) {
	if k.cfg.Streams != nil {
		k.cfg.Streams.SetReplayToken(id, token)
	}
}

// AddWorker registers a worker. In kv mode, a non-empty endpoint has
// KVConfig.Streams follow the worker's stream (a PUB socket, or a topic on
// the bound socket), with gap recovery through replayEndpoint if given; an
// empty one means an in-process worker that
// feeds its batches through Ingest. blockSize is the engine's block size (0:
// the router's); one that is not a multiple of the router's is refused for
// event routing with the kv_block_size_mismatch diagnostic (the error says
// so) and the worker is routed by approximation. Until its stream is live,
// a worker is routed with its approximate records too, so requests that
// arrive before the subscription is up are never routed blind. Re-adding a
// worker restarts its subscription.
func (k *KV) AddWorker(id, endpoint, replayEndpoint string, blockSize int) error {
	if id == "" {
		return errors.New("router: worker id is empty")
	}
	if blockSize == 0 {
		blockSize = k.cfg.BlockSize
	}
	k.RemoveWorker(id)
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return errors.New("router: kv policy closed")
	}
	w := k.newWorkerLocked(id)
	w.endpoint, w.replay, w.blockSize = endpoint, replayEndpoint, blockSize
	k.mu.Unlock()
	if k.events == nil {
		return nil
	}
	err := k.events.AddWorker(id, blockSize)
	k.events.SetTag(id, int32(w.slot))
	k.mu.RLock()
	tw, ok := k.timings[id]
	k.mu.RUnlock()
	if ok {
		k.setShare(id, tw.Timing)
	}
	if err != nil {
		w.refuse(fmt.Sprintf("engine block size %d is not a multiple of the router's %d; set --router-block-size to a divisor of it. Routing the worker by approximation", blockSize, k.cfg.BlockSize))
		return fmt.Errorf("router: worker %s: %w", id, err)
	}
	if endpoint == "" {
		// In process, nothing is lost in transit: the stream is complete
		// from the first batch Ingest receives.
		w.setStream(event.StreamStatus{State: event.StreamLive})
		return nil
	}
	if k.cfg.Streams == nil {
		return fmt.Errorf("router: worker %s: KV events at %q need an event follower (KVConfig.Streams)", id, endpoint)
	}
	stop, err := k.cfg.Streams.Follow(id, endpoint, replayEndpoint, w)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.stopSub = stop
	w.mu.Unlock()
	return nil
}

// BoundPrefix marks a worker endpoint that is a topic on the bound socket
// (--kv-events-bind): "topic:NAME". It equals planes/kvevents/follow.BoundPrefix.
const BoundPrefix = "topic:"

// RemoveWorker stops the worker's subscription and forgets it, its index
// entries and its diagnostics. Requests still in flight on it finish
// harmlessly.
func (k *KV) RemoveWorker(id string) {
	k.mu.Lock()
	w, ok := k.workers[id]
	if ok {
		delete(k.workers, id)
		k.slots[w.slot] = nil
		// Before the slot can be reused, under the same lock.
		k.active.dropWorker(w.slot)
		k.lastIDs, k.lastWs = nil, nil
		k.gen++
	}
	k.mu.Unlock()
	if !ok {
		return
	}
	w.stopTimer()
	w.setQueue(nil)
	w.mu.Lock()
	stop := w.stopSub
	w.stopSub = nil
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
	if k.events != nil {
		k.events.RemoveWorker(id)
	}
	k.approx.RemoveWorker(id)
	// Only now may the slot go to another worker: until the indexes have
	// dropped this one, their answers still carry its slot as its tag
	// (pickScratch.fill trusts a tag to name the slot's worker).
	k.mu.Lock()
	k.free = append(k.free, w.slot)
	k.mu.Unlock()
	if w.ttftAcc.Forget() {
		k.drifting.Add(-1)
	}
	k.board.ClearSubject(id)
	k.met.forget(id)
}

// WorkerRemoved implements Observer: the router dropped the worker.
func (k *KV) WorkerRemoved(id string) {
	k.mu.Lock()
	delete(k.timings, id)
	k.mu.Unlock()
	k.RemoveWorker(id)
}

// WorkerAdded implements WorkerObserver: a worker whose engine runs in
// this process and estimates its own prefill (engine/mocker's timing
// polynomial, engine/native's measured rate) is priced by that estimate;
// any other is priced by rates learned from its TTFTs.
func (k *KV) WorkerAdded(w Worker) {
	k.mu.Lock()
	k.timings[w.ID] = w
	kw := k.workers[w.ID]
	k.mu.Unlock()
	if kw != nil {
		kw.timing.setSource(w.Timing, w.Info.KVCapacityTokens)
		kw.setQueue(w.Queue)
		k.setShare(w.ID, w.Timing)
	}
}

// SharedTierEngine is an engine whose disk tier is shared with other
// workers of its host (engine/mocker's --kv-offload-disk-shared): its KV
// events' disk blocks are the shared tier's, which every worker of the
// same name can onboard.
type SharedTierEngine interface {
	KVSharedTier() string
}

// SharedHostEngine is an engine whose host-memory tier is shared with
// other workers of its host (engine/mocker's --kv-offload-host-shared):
// its KV events' host blocks are the shared pool's.
type SharedHostEngine interface {
	KVSharedHost() string
}

// setShare tells the event indexes which shared tiers the worker's host
// and disk blocks are, from its engine in this process.
func (k *KV) setShare(id string, src any) {
	var host, disk string
	s, okDisk := src.(SharedTierEngine)
	if okDisk {
		disk = s.KVSharedTier()
	}
	h, okHost := src.(SharedHostEngine)
	if okHost {
		host = h.KVSharedHost()
	}
	if okDisk || okHost {
		k.SetShareGroups(id, host, disk)
	}
}

// SetShareGroups tells the event indexes that the worker's host-memory
// tier is the shared pool named host and its disk tier the shared disk
// named disk ("": its own), so a group member's events for a shared tier
// count for every member (kvindex.Index.SetShareGroupTier). An engine in
// this process says so itself (SharedTierEngine, SharedHostEngine); a
// worker in another process says so in its discovery record.
func (k *KV) SetShareGroups(id, host, disk string) {
	if k.events == nil {
		return
	}
	k.events.SetShareGroupTier(id, kvcache.TierG2, host)
	k.events.SetShareGroupTier(id, kvcache.TierG3, disk)
	if host == "" && disk == "" {
		return
	}
	k.mu.RLock()
	w := k.workers[id]
	k.mu.RUnlock()
	if w != nil {
		// Its shared tiers fill from the other workers' streams too: its
		// hits are split by tier from the start, so a hit it holds only
		// there is priced as the copy it is.
		w.tiered.Store(true)
		k.anyTiered.Store(true)
	}
}

// Ingest is the in-process event path: an engine in this process hands its
// batches over directly, in order, with their sequence numbers. A gap in
// the numbers is a loss (there is no replay in process) and a lower number a
// restart, exactly as on the wire. b is not retained.
func (k *KV) Ingest(id string, seq uint64, b *event.Batch) error {
	k.mu.RLock()
	w := k.workers[id]
	k.mu.RUnlock()
	if w == nil {
		return fmt.Errorf("router: ingest for unknown worker %q", id)
	}
	w.ingestMu.Lock()
	defer w.ingestMu.Unlock()
	switch {
	case w.ingestHas && seq < w.ingestNext:
		w.HandleState(event.StreamStatus{State: event.StreamReset, Seq: seq})
	case seq > w.ingestNext:
		w.HandleState(event.StreamStatus{State: event.StreamLoss, Seq: seq, Lost: seq - w.ingestNext,
			Err: errors.New("sequence gap on the in-process path")})
	}
	w.ingestHas, w.ingestNext = true, seq+1
	w.HandleBatch(seq, b)
	return nil
}

// workerFor returns the worker, creating an unregistered one (a worker the
// router knows but nobody called AddWorker for: no stream, so it is
// approximated, and kv_events_missing will say so once it serves).
func (k *KV) workerFor(id string) *kvWorker {
	k.mu.RLock()
	w := k.workers[id]
	k.mu.RUnlock()
	if w != nil {
		return w
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if w = k.workers[id]; w == nil {
		w = k.newWorkerLocked(id)
		if k.events != nil {
			// Register with the event index so that in-process Ingest works
			// and lookups are consistent; no stream will come.
			_ = k.events.AddWorker(id, 0)
			k.events.SetTag(id, int32(w.slot))
		}
	}
	return w
}

func (k *KV) newWorkerLocked(id string) *kvWorker {
	var slot int
	if n := len(k.free); n > 0 {
		slot, k.free = k.free[n-1], k.free[:n-1]
	} else {
		slot = len(k.slots)
		k.slots = append(k.slots, nil)
	}
	tw := k.timings[id]
	w := newKVWorker(k, id, slot, tw.Timing, tw.Info.KVCapacityTokens)
	w.setQueue(tw.Queue)
	k.lastIDs, k.lastWs = nil, nil
	k.gen++
	k.workers[id] = w
	k.slots[slot] = w
	_ = k.approx.AddWorker(id, 0)
	k.approx.SetTag(id, int32(slot))
	return w
}

// Health returns each worker's event-stream state ("healthy", "missing",
// …), for /health details and tests.
func (k *KV) Health() map[string]string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make(map[string]string, len(k.workers))
	for id, w := range k.workers {
		out[id] = w.healthState().String()
	}
	return out
}

// EventStats returns each worker's KV event counts (for /health).
func (k *KV) EventStats() map[string]EventStats {
	now := k.cfg.Now().UnixNano()
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make(map[string]EventStats, len(k.workers))
	for id, w := range k.workers {
		st := EventStats{Applied: w.applied.Load(), LastAge: -1}
		if t := w.lastEvent.Load(); t != 0 {
			st.LastAge = time.Duration(now - t)
		}
		out[id] = st
	}
	return out
}

// String describes the policy for logs.
func (k *KV) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s(block=%d w=%g T=%g cost=%s", k.name, k.cfg.BlockSize, k.cfg.OverlapWeight, k.cfg.Temperature, k.cfg.Cost)
	if k.events != nil {
		fmt.Fprintf(&b, " events-timeout=%v on-missing=%s", k.cfg.KVEventsTimeout, k.cfg.OnMissing)
	}
	fmt.Fprintf(&b, " approx-ttl=%v)", k.cfg.ApproxTTL)
	return b.String()
}
