package responses

import (
	"container/list"
	"encoding/json"
	"sync"
	"time"

	"github.com/tandemllm/tandem/openai/chatstream"
)

// StoreConfig bounds the store: at most Size responses, Bytes of
// conversation JSON, each kept for TTL after it was written.
type StoreConfig struct {
	Size  int
	Bytes int64
	TTL   time.Duration
}

// DefaultStoreConfig is the flags' default.
func DefaultStoreConfig() StoreConfig {
	return StoreConfig{Size: 1024, Bytes: 256 << 20, TTL: time.Hour}
}

// Stored is one finished response: the response object (for GET) and the
// chat conversation it ends (for previous_response_id).
type Stored struct {
	Response     *Response
	Conversation []chatstream.Message
	size         int64
	expires      time.Time
	id           string
}

// Store is the bounded in-memory store of finished responses: least
// recently used out first, past Size or Bytes, and none kept past TTL. A
// Size of 0 stores nothing. Safe for concurrent use.
type Store struct {
	cfg   StoreConfig
	now   func() time.Time
	mu    sync.Mutex
	ll    *list.List // front: most recently used
	items map[string]*list.Element
	bytes int64
	// evicted counts responses dropped before their TTL for room.
	evicted uint64
}

// NewStore returns an empty store.
func NewStore(cfg StoreConfig) *Store {
	return &Store{cfg: cfg, now: time.Now, ll: list.New(), items: map[string]*list.Element{}}
}

// Config is the store's bounds.
func (s *Store) Config() StoreConfig { return s.cfg }

// Put stores a finished response. One larger than the byte bound is not
// stored (it reports false).
func (s *Store) Put(resp *Response, conv []chatstream.Message) bool {
	if s == nil || s.cfg.Size <= 0 {
		return false
	}
	b, err := json.Marshal(conv)
	if err != nil {
		return false
	}
	size := int64(len(b)) + 1024 // the response object, roughly
	if s.cfg.Bytes > 0 && size > s.cfg.Bytes {
		return false
	}
	st := &Stored{Response: resp, Conversation: conv, size: size, id: resp.ID, expires: s.now().Add(s.cfg.TTL)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.items[resp.ID]; ok {
		s.remove(e)
	}
	s.items[resp.ID] = s.ll.PushFront(st)
	s.bytes += size
	s.evict()
	return true
}

// Get returns the stored response id, if it is there and not expired.
func (s *Store) Get(id string) (*Stored, bool) {
	if s == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.items[id]
	if !ok {
		return nil, false
	}
	st := e.Value.(*Stored)
	if s.cfg.TTL > 0 && !s.now().Before(st.expires) {
		s.remove(e)
		return nil, false
	}
	s.ll.MoveToFront(e)
	return st, true
}

// Delete removes id; it reports whether it was there.
func (s *Store) Delete(id string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.items[id]
	if ok {
		s.remove(e)
	}
	return ok
}

// Stats are the stored responses, their bytes, and how many were
// evicted for room before their TTL.
func (s *Store) Stats() (n int, bytes int64, evicted uint64) {
	if s == nil {
		return 0, 0, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ll.Len(), s.bytes, s.evicted
}

// Len is the number of stored responses.
func (s *Store) Len() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ll.Len()
}

func (s *Store) remove(e *list.Element) {
	st := e.Value.(*Stored)
	s.ll.Remove(e)
	delete(s.items, st.id)
	s.bytes -= st.size
}

// evict drops expired responses from the back (as far as they run; one
// used since may hide older ones, which Get drops when asked for), then
// the least recently used ones past the bounds.
func (s *Store) evict() {
	now := s.now()
	for e := s.ll.Back(); e != nil && s.cfg.TTL > 0 && !now.Before(e.Value.(*Stored).expires); e = s.ll.Back() {
		s.remove(e)
	}
	for s.ll.Len() > s.cfg.Size || (s.cfg.Bytes > 0 && s.bytes > s.cfg.Bytes) {
		s.remove(s.ll.Back())
		s.evicted++
	}
}
