package discovery

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"time"

	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/backoff"
)

// Registry is where workers publish their records and frontends watch them.
// Implementations are safe for concurrent use.
type Registry interface {
	// Register publishes rec and keeps it alive until the Lease is revoked
	// or the Registry is closed; ctx bounds only the first publication.
	// Registering an id that is already live replaces that record.
	Register(ctx context.Context, rec Record) (Lease, error)
	// Watch calls fn, from one goroutine and in order, with a Put for every
	// live record, one Synced, then every change, until ctx ends (it then
	// returns nil) or the backend fails for good.
	Watch(ctx context.Context, fn func(Event)) error
	// Close revokes the leases this Registry holds and stops its
	// goroutines.
	Close() error
}

// Lease keeps one registration alive.
type Lease interface {
	// Revoke removes the record now (watchers see a Delete without waiting
	// for a TTL) and stops the keepalive. It is what a draining worker calls
	// first. Calling it again is harmless.
	Revoke(ctx context.Context) error
}

// EventType says what happened to a record.
type EventType uint8

const (
	// EventPut: the record is new or changed.
	EventPut EventType = iota + 1
	// EventDelete: the worker left (revoked, expired, or its process is
	// gone). Record is the last one known.
	EventDelete
	// EventSynced: every record live when Watch started has been reported.
	// Sent once.
	EventSynced
)

func (t EventType) String() string {
	switch t {
	case EventPut:
		return "put"
	case EventDelete:
		return "delete"
	case EventSynced:
		return "synced"
	}
	return "unknown"
}

// Event is one change seen by Watch.
type Event struct {
	Type   EventType
	Record Record
}

// Diagnostic codes raised on the health board.
const (
	// DiagUnavailable: the backend's store cannot be reached; the last
	// known set is kept meanwhile.
	DiagUnavailable = "discovery_unavailable"
	// DiagRecovered is logged when it can be reached again.
	DiagRecovered = "discovery_recovered"
	// DiagRecordInvalid: a stored record cannot be decoded or validated;
	// that worker is ignored.
	DiagRecordInvalid = "discovery_record_invalid"
	// DiagIDConflict: another process registered the same worker id.
	DiagIDConflict = "discovery_id_conflict"
)

// DefaultTTL is how long a worker that stopped refreshing its record stays
// listed (--lease-ttl).
const DefaultTTL = 10 * time.Second

// ErrClosed is returned by a Registry after Close.
var ErrClosed = errors.New("discovery: registry closed")

// Common holds what every backend needs besides its store.
type Common struct {
	// TTL is the lease time-to-live (default DefaultTTL).
	TTL time.Duration
	// Board receives diagnostics; nil creates a private one.
	Board *health.Board
	// Logger; nil is slog.Default().
	Logger *slog.Logger
}

func (c Common) withDefaults(component string) Common {
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("component", component)
	if c.Board == nil {
		c.Board = health.NewBoard(c.Logger, nil)
	}
	return c
}

// view is a watcher's copy of the live set. Backends feed it snapshots or
// single changes; it forwards only real differences, so a re-list after a
// reconnect costs consumers nothing when nothing changed.
type view struct {
	fn     func(Event)
	recs   map[string]Record
	synced bool
}

func newView(fn func(Event)) *view { return &view{fn: fn, recs: map[string]Record{}} }

// replace makes next the live set. Deletes go first so that a worker that
// restarted under a new id never briefly doubles its model's capacity.
func (v *view) replace(next map[string]Record) {
	var gone []string
	for id := range v.recs {
		if _, ok := next[id]; !ok {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		v.remove(id)
	}
	ids := make([]string, 0, len(next))
	for id := range next {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		v.put(next[id])
	}
	v.sync()
}

func (v *view) put(r Record) {
	if old, ok := v.recs[r.ID]; ok && reflect.DeepEqual(old, r) {
		return
	}
	v.recs[r.ID] = r
	v.fn(Event{Type: EventPut, Record: r})
}

func (v *view) remove(id string) {
	r, ok := v.recs[id]
	if !ok {
		return
	}
	delete(v.recs, id)
	v.fn(Event{Type: EventDelete, Record: r})
}

func (v *view) sync() {
	if !v.synced {
		v.synced = true
		v.fn(Event{Type: EventSynced})
	}
}

// retryBackoff is the registries' retry delay: from 50 ms to 2 s with
// jitter, so frontends that lost etcd together do not retry together.
func retryBackoff() backoff.Backoff {
	return backoff.Backoff{Base: 50 * time.Millisecond, Max: 2 * time.Second}
}
