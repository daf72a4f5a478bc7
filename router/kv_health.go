package router

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/planes/kvevents/event"
	"github.com/tandemllm/tandem/router/accuracy"
)

// workerHealth is how far the router trusts a worker's event stream. Only
// a healthy worker is routed by its events alone; every other state adds
// the worker's approximate records (its own routing decisions), so no
// worker is ever routed blind and none silently.
type workerHealth int32

const (
	// healthConnecting: no stream yet (dialing, reconnecting, or a worker
	// nobody registered a stream for).
	healthConnecting workerHealth = iota
	// healthSyncing: connected and caught up by replay; waiting for the first
	// live message to prove the subscription effective (ZMQ slow joiner).
	healthSyncing
	// healthHealthy: live and complete.
	healthHealthy
	// healthMissing: the worker computed full blocks and published no
	// BlockStored within --kv-events-timeout (kv_events_missing).
	healthMissing
	// healthRebuilding: events were lost; the index was cleared and is being
	// rebuilt by new events (kv_events_lost) for RebuildWindow.
	healthRebuilding
	// healthRefused: the engine's block size does not fit the router's
	// (kv_block_size_mismatch); approximation only.
	healthRefused
	// healthApprox: kv-approx mode.
	healthApprox
	numHealth
)

var healthNames = [numHealth]string{"connecting", "syncing", "healthy", "missing", "rebuilding", "refused", "approx"}

func (h workerHealth) String() string {
	if h >= 0 && h < numHealth {
		return healthNames[h]
	}
	return "unknown"
}

// kvWorker is the policy's state for one worker. It is also the worker's
// event.Handler: the follower's goroutine (or Ingest) calls it in stream
// order.
type kvWorker struct {
	k    *KV
	id   string
	slot int
	// tiered: the worker has published blocks of a tier below its pool
	// (KV offload), so KV.pool tracks its pool apart.
	tiered atomic.Bool

	endpoint, replay string
	blockSize        int
	// timing predicts the worker's TTFT (the ttft cost); held by value,
	// so a decision touches one object less per candidate.
	timing timingModel

	// Read by Pick without locks.
	state        atomic.Int32 // workerHealth, rebuilding excluded
	rebuildUntil atomic.Int64 // unix ns; rebuilding while now is before it

	mu            sync.Mutex
	stream        event.StreamState
	streamErr     error
	refused       bool
	missing       bool
	lastStored    time.Time
	pendingRouted time.Time // routing time of the request awaiting a BlockStored
	missTimer     *time.Timer
	rebuildTimer  *time.Timer
	stopSub       func()
	removed       bool

	// acc checks the worker's predicted prefixes (kv_prediction_drift),
	// ttftAcc its predicted TTFTs (ttft_model_drift); each has its own
	// lock.
	acc     accuracy.Prefix
	ttftAcc accuracy.TTFT

	// applied counts KV events applied to the index; lastEvent is when the
	// last batch arrived (unix ns, 0: never). Read by EventStats.
	applied   atomic.Uint64
	lastEvent atomic.Int64

	// queue is the engine's own queue report, when it has one
	// (kv_external.go).
	queue atomic.Pointer[queueSource]

	ingestMu   sync.Mutex
	ingestHas  bool
	ingestNext uint64
}

func newKVWorker(k *KV, id string, slot int, timing engine.PrefillEstimator, capacityTokens int) *kvWorker {
	w := &kvWorker{k: k, id: id, slot: slot, stream: event.StreamConnecting}
	w.timing.fleet = &k.fleetCoef
	w.timing.init(timing, capacityTokens)
	w.acc.Init(k.cfg.DriftWindow, k.cfg.DriftThreshold, defaultDriftRecoverRate)
	if k.events == nil {
		w.state.Store(int32(healthApprox))
	}
	k.met.setHealth(id, w.healthState())
	return w
}

// healthState is the worker's current state, rebuilding included.
func (w *kvWorker) healthState() workerHealth { return w.healthAt(w.k.cfg.Now().UnixNano()) }

// healthAt is healthState at a given time (unix ns), so a decision reads
// the clock once, not once per candidate.
func (w *kvWorker) healthAt(now int64) workerHealth {
	s := workerHealth(w.state.Load())
	if (s == healthConnecting || s == healthSyncing || s == healthHealthy) && now < w.rebuildUntil.Load() {
		return healthRebuilding
	}
	return s
}

// recompute derives the state from the facts, under w.mu, and publishes it.
func (w *kvWorker) recomputeLocked() {
	var s workerHealth
	switch {
	case w.k.events == nil:
		s = healthApprox
	case w.refused:
		s = healthRefused
	case w.missing:
		s = healthMissing
	case w.stream == event.StreamLive:
		s = healthHealthy
	case w.stream == event.StreamSynced:
		s = healthSyncing
	default:
		s = healthConnecting
	}
	w.state.Store(int32(s))
	if !w.removed {
		w.k.met.setHealth(w.id, w.healthState())
	}
}

func (w *kvWorker) refuse(msg string) {
	w.mu.Lock()
	w.refused = true
	w.recomputeLocked()
	w.mu.Unlock()
	w.k.board.Raise(DiagKVBlockSize, w.id, health.Error, "worker "+w.id+": "+msg, "worker", w.id, "engine_block_size", w.blockSize, "router_block_size", w.k.cfg.BlockSize)
}

// setStream records a stream state without side effects (in-process
// workers start live).
func (w *kvWorker) setStream(st event.StreamStatus) {
	w.mu.Lock()
	w.stream = st.State
	w.recomputeLocked()
	w.mu.Unlock()
}

// HandleBatch implements event.Handler.
func (w *kvWorker) HandleBatch(seq uint64, b *event.Batch) {
	k := w.k
	if k.events == nil {
		return
	}
	st, err := k.events.Apply(w.id, b.Events)
	if err == nil && !w.tiered.Load() && hasLowerTier(b.Events) {
		// From a worker's first offload on, its hits are split by tier
		// (until then its pool is all it holds, and decisions take the
		// cheaper lookup while no worker has tiers).
		w.tiered.Store(true)
		k.anyTiered.Store(true)
	}
	if err != nil {
		k.log.Debug("KV events for a worker the index does not know", "worker", w.id, "err", err)
		return
	}
	k.met.blockEvents.WithLabelValues(w.id).Add(float64(st.Stored + st.Removed))
	now := k.cfg.Now()
	w.lastEvent.Store(now.UnixNano())
	k.met.lastEvent.WithLabelValues(w.id).Set(float64(now.UnixNano()) / 1e9)
	if n := st.StoredEvents + st.Cleared + appliedRemovals(b.Events); n > 0 {
		w.applied.Add(uint64(n))
		k.met.applied.WithLabelValues(w.id).Add(float64(n))
	}
	if st.BlockSizeMismatch > 0 {
		k.board.Raise(DiagKVBlockSize, w.id, health.Error,
			fmt.Sprintf("worker %s published blocks whose size is not a multiple of the router's %d; they are dropped", w.id, k.cfg.BlockSize),
			"worker", w.id, "events", st.BlockSizeMismatch, "seq", seq)
	}
	if st.StoredEvents > 0 {
		w.onStored()
	}
}

// hasLowerTier reports whether a batch has events of a tier below the
// engine's pool.
func hasLowerTier(evs []event.Event) bool {
	for i := range evs {
		if m := evs[i].Medium; m != "" && m != "GPU" && evs[i].Type != event.TypeAllBlocksCleared {
			return true
		}
	}
	return false
}

// appliedRemovals counts the batch's device-tier BlockRemoved events.
func appliedRemovals(evs []event.Event) int {
	n := 0
	for i := range evs {
		if evs[i].Type == event.TypeBlockRemoved && (evs[i].Medium == "" || evs[i].Medium == "GPU") {
			n++
		}
	}
	return n
}

// EventStats is what a worker's KV events did: how many were applied to
// the index and how long ago the last batch arrived.
type EventStats struct {
	Applied uint64
	// LastAge is the age of the last batch; negative: none ever arrived.
	LastAge time.Duration
}

// onStored is the proof that events flow.
func (w *kvWorker) onStored() {
	now := w.k.cfg.Now()
	w.mu.Lock()
	w.lastStored = now
	w.pendingRouted = time.Time{}
	if w.missTimer != nil {
		w.missTimer.Stop()
		w.missTimer = nil
	}
	recovered := w.missing
	w.missing = false
	if recovered {
		w.recomputeLocked()
	}
	w.mu.Unlock()
	if recovered {
		w.k.board.Clear(DiagKVEventsMissing, w.id, DiagKVEventsRecovered, "KV events flow again; routing the worker by its events")
	}
}

// HandleState implements event.Handler.
func (w *kvWorker) HandleState(st event.StreamStatus) {
	k := w.k
	switch st.State {
	case event.StreamLoss:
		// The index can no longer be trusted for this worker: drop it and
		// let new events rebuild it, routing with the approximate records
		// meanwhile.
		k.events.ClearWorker(w.id)
		w.mu.Lock()
		until := w.rebuildLocked()
		w.recomputeLocked()
		w.mu.Unlock()
		k.board.Raise(DiagKVEventsLost, w.id, health.Warn,
			fmt.Sprintf("KV events of worker %s were lost and could not be replayed; its index was cleared and is rebuilding, routing it by approximation until %s", w.id, until.Format(time.RFC3339)),
			"worker", w.id, "lost_batches", st.Lost, "seq", st.Seq, "err", st.Err)
		return
	case event.StreamReset:
		// A restarted engine has an empty cache: forget what it held and
		// where we sent requests before.
		k.events.ClearWorker(w.id)
		k.approx.ClearWorker(w.id)
		k.log.Warn("KV event publisher restarted; cleared the worker's index", "worker", w.id)
		return
	}
	w.mu.Lock()
	prev := w.stream
	w.stream, w.streamErr = st.State, st.Err
	if st.MidStream {
		// The index lacks what the batches before the first one stored
		// (published before the subscription took effect, or before it
		// existed): the worker's own routing records fill in for
		// RebuildWindow, as after a loss, but nothing was lost that the
		// subscriber could have had, so no diagnostic.
		w.rebuildLocked()
	}
	w.recomputeLocked()
	w.mu.Unlock()
	switch {
	case st.State == event.StreamLive && st.MidStream:
		k.log.Info("KV event stream live from mid-stream; routing the worker by its events and its routing records until the window ends",
			"worker", w.id, "seq", st.Seq, "window", k.cfg.RebuildWindow)
	case st.State == event.StreamLive && prev != event.StreamLive:
		k.log.Info("KV event stream live; routing the worker by its events", "worker", w.id, "seq", st.Seq)
	}
}

// rebuildLocked starts (or restarts) the rebuild window, under w.mu, and
// returns its end.
func (w *kvWorker) rebuildLocked() time.Time {
	until := w.k.cfg.Now().Add(w.k.cfg.RebuildWindow)
	w.rebuildUntil.Store(until.UnixNano())
	if w.rebuildTimer != nil {
		w.rebuildTimer.Stop()
	}
	w.rebuildTimer = time.AfterFunc(w.k.cfg.RebuildWindow, w.rebuilt)
	return until
}

func (w *kvWorker) rebuilt() {
	w.mu.Lock()
	if rest := time.Duration(w.rebuildUntil.Load() - w.k.cfg.Now().UnixNano()); rest > 0 && !w.removed {
		// The timer runs on the monotonic clock, the window on cfg.Now's
		// wall time: a timer that fires a moment early would publish
		// "rebuilding" as the state the window left behind. Wait the rest.
		w.rebuildTimer = time.AfterFunc(rest, w.rebuilt)
		w.mu.Unlock()
		return
	}
	removed := w.removed
	w.recomputeLocked()
	w.mu.Unlock()
	if !removed {
		w.k.board.Clear(DiagKVEventsLost, w.id, DiagKVEventsRebuilt, "worker's index rebuilt from new KV events; routing it by its events again")
	}
}

// expectStored is called when the engine reported computing at least one
// new full block for a request routed at routedAt: a BlockStored must
// follow. If none has arrived since routedAt within the timeout, the
// worker's events are missing.
func (w *kvWorker) expectStored(routedAt time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.removed || w.missing || w.refused || !w.lastStored.Before(routedAt) || !w.pendingRouted.IsZero() {
		return
	}
	w.pendingRouted = routedAt
	// The deadline runs from when the request reached the worker, so the
	// diagnostic lands one timeout after the first unexplained request.
	w.missTimer = time.AfterFunc(w.k.cfg.KVEventsTimeout-w.k.cfg.Now().Sub(routedAt), w.checkMissing)
}

func (w *kvWorker) checkMissing() {
	k := w.k
	w.mu.Lock()
	if w.removed || w.pendingRouted.IsZero() || !w.lastStored.Before(w.pendingRouted) {
		w.pendingRouted = time.Time{}
		w.mu.Unlock()
		return
	}
	waited := k.cfg.Now().Sub(w.pendingRouted)
	w.pendingRouted = time.Time{}
	w.missing = true
	w.missTimer = nil
	w.recomputeLocked()
	stream, serr := w.stream, w.streamErr
	w.mu.Unlock()
	action := "routing it by approximation until events flow"
	if k.cfg.OnMissing == MissingFail {
		action = "not routing to it until events flow (--on-missing-kv-events=fail)"
	}
	why := "connected, but no BlockStored arrived"
	switch {
	case w.endpoint == "" && stream == event.StreamLive:
		why = "in-process worker whose engine fed no BlockStored"
	case stream != event.StreamLive && stream != event.StreamSynced:
		why = "event subscription not connected"
		if serr != nil {
			why += ": " + serr.Error()
		}
	}
	attrs := []any{"worker", w.id, "endpoint", w.endpoint, "stream", stream.String(), "waited_ms", waited.Milliseconds(),
		"kv_events_timeout", k.cfg.KVEventsTimeout, "on_missing", string(k.cfg.OnMissing),
		"suggested_action", "enable the engine's KV events (vLLM --kv-events-config, Tandem mocker --kv-events on) and check the endpoint, or use --router-mode kv-approx"}
	k.board.Raise(DiagKVEventsMissing, w.id, health.Error,
		fmt.Sprintf("worker %s computed new KV blocks but published no BlockStored within %v (%s); %s", w.id, k.cfg.KVEventsTimeout, why, action),
		attrs...)
}

func (w *kvWorker) stopTimer() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.removed = true
	w.acc.Close()
	if w.missTimer != nil {
		w.missTimer.Stop()
	}
	if w.rebuildTimer != nil {
		w.rebuildTimer.Stop()
	}
}
