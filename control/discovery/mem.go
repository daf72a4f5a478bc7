package discovery

import (
	"context"
	"maps"
	"sync"
)

// Mem is a Registry inside one process. Leases never expire by themselves:
// a worker in the same process cannot die without the process.
type Mem struct {
	mu     sync.Mutex
	recs   map[string]memEntry
	subs   map[chan struct{}]struct{}
	next   uint64
	closed bool
}

type memEntry struct {
	rec   Record
	lease uint64
}

// NewMem returns an empty in-process Registry.
func NewMem() *Mem {
	return &Mem{recs: map[string]memEntry{}, subs: map[chan struct{}]struct{}{}}
}

// Register implements Registry.
func (m *Mem) Register(_ context.Context, rec Record) (Lease, error) {
	if err := rec.Validate(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	m.next++
	l := &memLease{m: m, id: rec.ID, lease: m.next}
	m.recs[rec.ID] = memEntry{rec: rec, lease: l.lease}
	m.notifyLocked()
	m.mu.Unlock()
	return l, nil
}

func (m *Mem) notifyLocked() {
	for c := range m.subs {
		select {
		case c <- struct{}{}:
		default: // a wake-up is already pending; the watcher reads the latest set
		}
	}
}

func (m *Mem) snapshot() map[string]Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Record, len(m.recs))
	for id, e := range m.recs {
		out[id] = e.rec
	}
	return out
}

// Watch implements Registry. Changes are coalesced: a watcher that is busy
// sees the latest set, not every intermediate one.
func (m *Mem) Watch(ctx context.Context, fn func(Event)) error {
	wake := make(chan struct{}, 1)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	m.subs[wake] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.subs, wake)
		m.mu.Unlock()
	}()
	v := newView(fn)
	v.replace(m.snapshot())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			v.replace(m.snapshot())
		}
	}
}

// Records returns the live records (tests, debugging).
func (m *Mem) Records() map[string]Record { return maps.Clone(m.snapshot()) }

// Close implements Registry: every record goes.
func (m *Mem) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	clear(m.recs)
	m.notifyLocked()
	return nil
}

type memLease struct {
	m     *Mem
	id    string
	lease uint64
}

// Revoke implements Lease. It removes the record only if it is still this
// lease's: a worker re-registered under the same id keeps its record.
func (l *memLease) Revoke(context.Context) error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if e, ok := l.m.recs[l.id]; ok && e.lease == l.lease {
		delete(l.m.recs, l.id)
		l.m.notifyLocked()
	}
	return nil
}
