package dispatch

import (
	"slices"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/kvcache"
	"github.com/tandemllm/tandem/router"
)

// WorkerStatus is a routed worker as /health shows it.
type WorkerStatus struct {
	ID, Model string
	// Engine is the engine's kind (engine.Info.Kind).
	Engine string
	// KVEvents is the worker's KV event stream state under the kv
	// policies ("" under others); under kv, "approx" for a worker whose
	// events the router does not follow (its record names no endpoint: it
	// is routed by approximation).
	KVEvents string
	// Events counts the KV events applied for it (kv mode; nil otherwise).
	Events *EventStats
	// Stuck: it holds requests but produces nothing; the router skips it.
	Stuck bool
	// Queue is the engine's own account of its queue (nil: none, or not
	// known yet).
	Queue *EngineQueue
	// Tiers are the KV tiers of an in-process engine that has some
	// (TierReporter; nil otherwise).
	Tiers *kvcache.TierStats
	// Memory is an in-process engine's memory (engine.MemoryReporter;
	// nil otherwise).
	Memory *engine.Memory
}

// TierReporter is an in-process engine with KV tiers below its pool
// (engine/mocker): its tiers' blocks, bytes and traffic for /health,
// read without waiting for its step loop.
type TierReporter interface {
	KVTiers() (kvcache.TierStats, bool)
}

// EventStats shows that a worker's events, not approximation, route it.
type EventStats struct {
	Applied uint64
	// LastAge is the age of the last batch; negative: none ever arrived.
	LastAge time.Duration
}

// EngineQueue is an engine's own queue report, other clients' requests
// included (an upstream server's /metrics), as the kv costs read it.
type EngineQueue struct {
	Running, Waiting int
	Age              time.Duration
}

// workerStates is implemented by policies that track per-worker state
// worth showing on /health (the kv policies' event stream state).
type workerStates interface{ Health() map[string]string }

// workerEvents is implemented by the kv policy: per-worker event counts.
type workerEvents interface {
	EventStats() map[string]router.EventStats
}

// Workers returns the routed workers' state. It checks for stuck workers
// first, which may raise worker_stuck on the board.
func (d *Dispatcher) Workers() []WorkerStatus {
	var states map[string]string
	if ws, ok := d.router.Policy().(workerStates); ok {
		states = ws.Health()
	}
	var evs map[string]router.EventStats
	if we, ok := d.router.Policy().(workerEvents); ok {
		evs = we.EventStats()
	}
	follows := d.router.Policy().Name() == "kv"
	stuck := d.router.CheckStuck()
	var out []WorkerStatus
	for _, wk := range d.router.Workers() {
		ws := WorkerStatus{ID: wk.ID, Model: wk.Model, Engine: wk.Info.Kind, KVEvents: states[wk.ID], Stuck: slices.Contains(stuck, wk.ID)}
		if ws.KVEvents == "" && follows {
			ws.KVEvents = "approx"
		}
		if wk.Queue != nil {
			if running, waiting, at, ok := wk.Queue.EngineQueue(); ok {
				ws.Queue = &EngineQueue{Running: running, Waiting: waiting, Age: time.Since(at)}
			}
		}
		if st, ok := evs[wk.ID]; ok {
			ws.Events = &EventStats{Applied: st.Applied, LastAge: st.LastAge}
		}
		if tr, ok := wk.Timing.(TierReporter); ok {
			if st, ok := tr.KVTiers(); ok {
				ws.Tiers = &st
			}
		}
		if mr, ok := wk.Timing.(engine.MemoryReporter); ok {
			m := mr.Memory()
			ws.Memory = &m
		}
		out = append(out, ws)
	}
	return out
}
