package eventplane

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tandemllm/tandem/planes/kvevents"
)

// followFlushTimeout bounds Follow's wait for the server to confirm the
// subscription.
const followFlushTimeout = 10 * time.Second

// Source is the router side: one NATS subscription per model, every batch
// handed to an IngestFunc. It implements fleet.EventSource.
type Source struct {
	nc     *nats.Conn
	prefix string
	log    *slog.Logger

	mu     sync.Mutex
	subs   map[string]*nats.Subscription // by model
	closed bool

	received, corrupt, unknown atomic.Uint64
}

// NewSource returns a Source on nc; subjects start with prefix.
func NewSource(nc *nats.Conn, prefix string, log *slog.Logger) *Source {
	if log == nil {
		log = slog.Default()
	}
	return &Source{nc: nc, prefix: prefix, log: log.With("component", "eventplane.source"), subs: map[string]*nats.Subscription{}}
}

// Follow subscribes to model's KV subject and hands every batch to ingest
// (router.KV.Ingest), in each worker's sequence order; b is valid only
// during the call. NATS delivers one
// subscription's messages in order from one goroutine, and each worker
// publishes from one connection, so each worker's batches arrive in its
// sequence order; what NATS drops shows up as a sequence gap. A model
// already followed is left as it is (its first ingest keeps its batches).
func (s *Source) Follow(ctx context.Context, model string, ingest func(worker string, seq uint64, b *kvevents.Batch) error) error {
	s.mu.Lock()
	followed := s.subs[model] != nil
	s.mu.Unlock()
	if followed {
		return nil
	}
	var dec kvevents.Decoder
	var batch kvevents.Batch
	sub, err := s.nc.Subscribe(KVSubject(s.prefix, model), func(m *nats.Msg) {
		if m.Header.Get(hdrModel) != model {
			return // another model whose name maps to the same subject
		}
		worker := m.Header.Get(hdrWorker)
		seq, err := strconv.ParseUint(m.Header.Get(hdrSeq), 10, 64)
		if worker == "" || err != nil {
			s.corrupt.Add(1)
			s.log.Warn("KV event message without worker or sequence", "diagnostic_code", kvevents.CodeCorrupt, "worker", worker)
			return
		}
		if err := dec.Decode(m.Data, &batch); err != nil {
			// Its sequence number is lost with it: the next batch reports
			// the gap.
			s.corrupt.Add(1)
			s.log.Warn("corrupt KV event batch", "diagnostic_code", kvevents.CodeCorrupt, "worker", worker, "seq", seq, "err", err)
			return
		}
		s.received.Add(1)
		if ingest(worker, seq, &batch) != nil {
			// A worker not (or no longer) admitted by this router.
			s.unknown.Add(1)
		}
	})
	if err != nil {
		return fmt.Errorf("eventplane: subscribe %s: %w", model, err)
	}
	// A router that falls behind should lose batches (a visible gap), not
	// stall the connection every other subscription shares.
	if err := sub.SetPendingLimits(1<<20, 1<<30); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("eventplane: subscribe %s: %w", model, err)
	}
	// The server has the subscription once the flush returns: a batch a
	// worker relays after Follow returned reaches this router (NATS drops
	// messages published before the server processed the SUB).
	if err := s.nc.FlushTimeout(followFlushTimeout); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("eventplane: subscribe %s: %w", model, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.subs[model] != nil {
		_ = sub.Unsubscribe()
		if s.closed {
			return fmt.Errorf("eventplane: source closed")
		}
		return nil // a concurrent Follow of the model won
	}
	s.subs[model] = sub
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.subs[model] == sub {
			delete(s.subs, model)
		}
		_ = sub.Unsubscribe()
	})
	return nil
}

// Stats returns the batches received, dropped as corrupt, and received for
// workers this router does not know.
func (s *Source) Stats() (received, corrupt, unknown uint64) {
	return s.received.Load(), s.corrupt.Load(), s.unknown.Load()
}

// Close unsubscribes; the connection is the caller's.
func (s *Source) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	clear(s.subs)
	return nil
}
