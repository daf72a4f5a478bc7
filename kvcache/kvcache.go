package kvcache

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/tandemllm/tandem/tokenid"
)

// BlockID indexes a physical block in [0, NumBlocks). It is dense so engines
// can use it directly as an offset into their K/V pools.
type BlockID = int32

const noBlock BlockID = -1

// ErrNoSpace is returned by Allocate and Import when the free and evictable
// blocks together cannot satisfy the request. Nothing was changed; the
// caller typically preempts a sequence and retries.
var ErrNoSpace = errors.New("kvcache: not enough free blocks")

// ErrInUse is returned by Reset while sequences still hold blocks.
var ErrInUse = errors.New("kvcache: blocks are in use")

// EventSink receives the cache's block events, in the order they happen.
// Slices are only valid during the call.
type EventSink interface {
	// BlocksStored reports blocks that just became cached: a contiguous run
	// of one sequence, blocks[i] holding tokens[i*BlockSize:(i+1)*BlockSize].
	// parent is the hash of the block before blocks[0], zero at a sequence's
	// start.
	BlocksStored(parent BlockHash, blocks []BlockHash, tokens []tokenid.ID)
	// BlocksRemoved reports cached blocks that were evicted.
	BlocksRemoved(blocks []BlockHash)
	// AllBlocksCleared reports that Reset dropped every cached block.
	AllBlocksCleared()
}

// Config sizes a Cache.
type Config struct {
	NumBlocks int // physical blocks; required
	BlockSize int // tokens per block; required
	// Hasher computes block hashes; nil selects XXH3Hasher.
	Hasher Hasher
	// Sink receives block events; nil drops them.
	Sink EventSink
	// DisablePrefixCaching turns off sharing: Acquire matches nothing, full
	// blocks are never indexed and no events are emitted.
	DisablePrefixCaching bool
	// Tiers adds host-memory and disk tiers below the pool (tiers.go);
	// the zero value has none.
	Tiers TierConfig
}

// Stats is a snapshot of block usage.
type Stats struct {
	NumBlocks int
	BlockSize int
	Used      int // referenced by at least one sequence
	Cached    int // unreferenced, reusable by prefix match, evictable
	Free      int // unreferenced and empty (includes never-touched blocks)
}

// Usage is the fraction of blocks in use, vLLM's kv_cache_usage_perc (cached
// blocks count as free because they can be evicted at any time).
func (s Stats) Usage() float64 {
	if s.NumBlocks == 0 {
		return 0
	}
	return float64(s.Used) / float64(s.NumBlocks)
}

// BlockInfo describes one physical block, for export and debugging.
type BlockInfo struct {
	Ref    int
	Hashed bool      // full, committed and findable by prefix match
	Hash   BlockHash // valid when Hashed
	// Tokens are the block's tokens when it is committed (nil otherwise).
	// The slice aliases cache storage: copy it to keep it.
	Tokens []tokenid.ID
}

type blockMeta struct {
	hash       BlockHash
	parent     BlockHash // the previous block's hash (zero for block 0), for tier events
	ref        int32
	prev, next BlockID // LRU links while cached
	hashed     bool    // present in the index
	committed  bool    // tokens[] holds the block's tokens
}

// Cache manages a fixed pool of KV blocks. See the package documentation.
type Cache struct {
	numBlocks int
	bs        int
	hasher    Hasher
	sink      EventSink
	noPrefix  bool
	tiers     *tiers // nil: no lower tiers

	// Per-block state for blocks [0, len(meta)); blocks at or beyond
	// len(meta) were never touched and are implicitly free. Growing lazily
	// keeps an idle worker's cache nearly free of memory.
	meta   []blockMeta
	tokens []tokenid.ID // len(meta)*bs

	free             []BlockID // touched, unreferenced, not hashed
	lruHead, lruTail BlockID   // cached blocks; head is evicted first
	index            map[uint64]BlockID

	used, cached int

	removed []BlockHash // scratch for BlocksRemoved
	run     []BlockHash // scratch for BlocksStored

	// changed is the only state shared with other goroutines: see Changed.
	changed notifier
}

// notifier hands out a channel that is closed on the next publication. It
// is lock-free so that Commit, which runs on every scheduler step, pays one
// atomic load when nobody is waiting and never allocates: the channel is
// made by the waiter, not by the committer.
type notifier struct {
	ch atomic.Pointer[chan struct{}]
}

// wait returns the channel the next fire closes.
func (n *notifier) wait() <-chan struct{} {
	for {
		if p := n.ch.Load(); p != nil {
			return *p
		}
		ch := make(chan struct{})
		if n.ch.CompareAndSwap(nil, &ch) {
			return ch
		}
		// Another waiter installed one first: share it.
	}
}

// fire closes the current channel, if any. Swap hands each channel to
// exactly one firer, so none is closed twice.
func (n *notifier) fire() {
	if n.ch.Load() == nil {
		return
	}
	if p := n.ch.Swap(nil); p != nil {
		close(*p)
	}
}

// Changed returns a channel that is closed the next time blocks are
// published: committed (or imported) blocks that prefix matching can newly
// find. Unlike every other method it is safe to call from any goroutine, so
// a KV exporter can wait for a running prefill's next chunk without polling
// the scheduler. Take the channel before inspecting the cache (through the
// owner goroutine): a publication between the two then closes it, and none
// is missed. Wake-ups may be spurious (the blocks may already be evicted).
func (c *Cache) Changed() <-chan struct{} { return c.changed.wait() }

// New returns an empty cache.
func New(cfg Config) (*Cache, error) {
	if cfg.NumBlocks <= 0 || cfg.NumBlocks > 1<<31-1 {
		return nil, fmt.Errorf("kvcache: NumBlocks %d out of range", cfg.NumBlocks)
	}
	if cfg.BlockSize <= 0 {
		return nil, fmt.Errorf("kvcache: BlockSize %d must be positive", cfg.BlockSize)
	}
	h := cfg.Hasher
	if h == nil {
		h = &XXH3Hasher{}
	}
	t, err := newTiers(cfg.Tiers)
	if err != nil {
		return nil, err
	}
	return &Cache{
		tiers:     t,
		numBlocks: cfg.NumBlocks,
		bs:        cfg.BlockSize,
		hasher:    h,
		sink:      cfg.Sink,
		noPrefix:  cfg.DisablePrefixCaching,
		lruHead:   noBlock,
		lruTail:   noBlock,
	}, nil
}

// BlockSize returns the tokens per block.
func (c *Cache) BlockSize() int { return c.bs }

// NumBlocks returns the pool size.
func (c *Cache) NumBlocks() int { return c.numBlocks }

// Stats returns current block usage.
func (c *Cache) Stats() Stats {
	return Stats{
		NumBlocks: c.numBlocks,
		BlockSize: c.bs,
		Used:      c.used,
		Cached:    c.cached,
		Free:      c.numBlocks - c.used - c.cached,
	}
}

// Seq is one sequence's block table plus the hashes computed for its tokens
// so far. The zero value is an empty sequence. Tokens passed for a Seq across
// calls must extend each other (a sequence only grows); Reset it before
// reusing it for different tokens.
type Seq struct {
	blocks    []BlockID
	numTokens int         // token slots allocated
	committed int         // leading blocks committed
	hashes    []BlockHash // hashes of the token stream's full blocks; survives Free
}

// Blocks returns the block table: Blocks()[i] holds tokens
// [i*BlockSize, (i+1)*BlockSize). The slice is valid until the next call
// that changes the Seq.
func (s *Seq) Blocks() []BlockID { return s.blocks }

// NumTokens returns the token slots allocated.
func (s *Seq) NumTokens() int { return s.numTokens }

// NumCommitted returns how many leading blocks are committed.
func (s *Seq) NumCommitted() int { return s.committed }

// Hash returns the hash of full block i, if it has been computed.
func (s *Seq) Hash(i int) (BlockHash, bool) {
	if i < 0 || i >= len(s.hashes) {
		return BlockHash{}, false
	}
	return s.hashes[i], true
}

// Reset clears the Seq entirely, including its hash memo. It must not hold
// blocks (call Cache.Free first).
func (s *Seq) Reset() {
	s.blocks = s.blocks[:0]
	s.numTokens, s.committed = 0, 0
	s.hashes = s.hashes[:0]
}

// hashUpTo makes sure s.hashes covers the first n full blocks of tokens.
func (c *Cache) hashUpTo(s *Seq, tokens []tokenid.ID, n int) {
	for i := len(s.hashes); i < n; i++ {
		var parent BlockHash
		if i > 0 {
			parent = s.hashes[i-1]
		}
		s.hashes = append(s.hashes, c.hasher.Hash(parent, tokens[i*c.bs:(i+1)*c.bs]))
	}
}

// lookup returns the cached or in-use block holding h.
func (c *Cache) lookup(h BlockHash) (BlockID, bool) {
	b, ok := c.index[h.Uint64()]
	if !ok || c.meta[b].hash != h {
		return noBlock, false
	}
	return b, true
}

// Match returns how many leading tokens (whole blocks) are in the cache,
// without referencing anything or touching LRU order. Routers and admission
// estimates use it; it hashes tokens on every call.
func (c *Cache) Match(tokens []tokenid.ID) int {
	if c.noPrefix || len(c.index) == 0 {
		return 0
	}
	var parent BlockHash
	n := 0
	for i := 0; (i+1)*c.bs <= len(tokens); i++ {
		h := c.hasher.Hash(parent, tokens[i*c.bs:(i+1)*c.bs])
		if _, ok := c.lookup(h); !ok {
			break
		}
		parent = h
		n++
	}
	return n * c.bs
}

// Acquire references the longest cached prefix of tokens (whole blocks) for
// an empty Seq and returns its length in tokens. A Seq that already holds
// blocks is left alone and 0 is returned.
func (c *Cache) Acquire(s *Seq, tokens []tokenid.ID) int {
	if c.noPrefix || len(s.blocks) != 0 {
		return 0
	}
	full := len(tokens) / c.bs
	for i := 0; i < full; i++ {
		if i >= len(s.hashes) {
			if len(c.index) == 0 {
				break
			}
			c.hashUpTo(s, tokens, i+1)
		}
		b, ok := c.lookup(s.hashes[i])
		if !ok {
			break
		}
		c.ref(b)
		s.blocks = append(s.blocks, b)
	}
	s.committed = len(s.blocks)
	s.numTokens = len(s.blocks) * c.bs
	return s.numTokens
}

// ref takes a reference on b, pulling it out of the LRU if it was cached.
func (c *Cache) ref(b BlockID) {
	m := &c.meta[b]
	if m.ref == 0 {
		c.lruRemove(b)
		c.cached--
		c.used++
	}
	m.ref++
}

// Allocate grows s so it has slots for numTokens tokens in total, evicting
// cached blocks LRU-first if free ones run out. It is all-or-nothing: on
// ErrNoSpace nothing changed. Shrinking is not supported; a smaller
// numTokens is a no-op.
func (c *Cache) Allocate(s *Seq, numTokens int) error {
	need := (numTokens+c.bs-1)/c.bs - len(s.blocks)
	if need <= 0 {
		if numTokens > s.numTokens {
			s.numTokens = numTokens
		}
		return nil
	}
	if avail := c.numBlocks - c.used; need > avail {
		return fmt.Errorf("%w: need %d blocks, %d free or evictable", ErrNoSpace, need, avail)
	}
	c.removed = c.removed[:0]
	for range need {
		s.blocks = append(s.blocks, c.take())
	}
	s.numTokens = numTokens
	if len(c.removed) > 0 && c.sink != nil {
		c.sink.BlocksRemoved(c.removed)
	}
	return nil
}

// take returns a block with ref 1: a free one, else a never-touched one, else
// the least recently used cached one (recording its eviction in c.removed).
func (c *Cache) take() BlockID {
	var b BlockID
	switch {
	case len(c.free) > 0:
		b = c.free[len(c.free)-1]
		c.free = c.free[:len(c.free)-1]
	case len(c.meta) < c.numBlocks:
		b = BlockID(len(c.meta))
		c.meta = append(c.meta, blockMeta{prev: noBlock, next: noBlock})
		c.tokens = append(c.tokens, make([]tokenid.ID, c.bs)...)
	default:
		b = c.lruHead
		c.lruRemove(b)
		c.cached--
		m := &c.meta[b]
		if c.tiers != nil {
			c.offload(b)
		}
		delete(c.index, m.hash.Uint64())
		c.removed = append(c.removed, m.hash)
		m.hashed = false
	}
	m := &c.meta[b]
	m.ref = 1
	m.committed = false
	c.used++
	return b
}

// Commit hashes and publishes the full blocks of s within tokens (the tokens
// whose K/V is now computed; only the first NumTokens count). Blocks whose
// hash already lives in another block are deduplicated: s switches to the
// existing block and releases its own.
func (c *Cache) Commit(s *Seq, tokens []tokenid.ID) {
	n := min(len(tokens), s.numTokens)
	full := n / c.bs
	if full <= s.committed {
		return
	}
	c.hashUpTo(s, tokens, full)
	published := false
	runStart := -1
	c.run = c.run[:0]
	flush := func(end int) {
		if runStart < 0 {
			return
		}
		if c.sink != nil {
			var parent BlockHash
			if runStart > 0 {
				parent = s.hashes[runStart-1]
			}
			c.sink.BlocksStored(parent, c.run, tokens[runStart*c.bs:end*c.bs])
		}
		runStart = -1
		c.run = c.run[:0]
	}
	for i := s.committed; i < full; i++ {
		b := s.blocks[i]
		m := &c.meta[b]
		copy(c.tokens[int(b)*c.bs:(int(b)+1)*c.bs], tokens[i*c.bs:(i+1)*c.bs])
		m.committed = true
		if c.noPrefix {
			continue
		}
		h := s.hashes[i]
		if c.index == nil {
			c.index = make(map[uint64]BlockID)
		}
		if e, ok := c.index[h.Uint64()]; ok {
			flush(i)
			if c.meta[e].hash == h && e != b {
				// Same content already cached: share it, recycle ours.
				c.ref(e)
				m.ref = 0
				m.committed = false
				c.used--
				c.free = append(c.free, b)
				s.blocks[i] = e
			}
			// On a 64-bit key collision the block simply stays private.
			continue
		}
		c.index[h.Uint64()] = b
		m.hash = h
		m.parent = BlockHash{}
		if i > 0 {
			m.parent = s.hashes[i-1]
		}
		m.hashed = true
		published = true
		if runStart < 0 {
			runStart = i
		}
		c.run = append(c.run, h)
	}
	flush(full)
	s.committed = full
	// Only blocks new to the index wake waiters: a deduplicated block or a
	// cache without prefix sharing gives an exporter nothing new to find.
	if published {
		c.changed.fire()
	}
}

// Free drops s's references. Blocks nobody else holds become cached if they
// are hashed (the sequence's last block first in eviction order, as vLLM
// does, so shared prefixes outlive their tails) or free otherwise. The Seq
// keeps its hash memo so a preempted sequence re-admits cheaply.
func (c *Cache) Free(s *Seq) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		b := s.blocks[i]
		m := &c.meta[b]
		m.ref--
		if m.ref > 0 {
			continue
		}
		c.used--
		if m.hashed {
			c.lruPush(b)
			c.cached++
		} else {
			m.committed = false
			c.free = append(c.free, b)
		}
	}
	s.blocks = s.blocks[:0]
	s.numTokens, s.committed = 0, 0
}

// Import appends the full blocks of tokens beyond what s already holds, for
// KV received from another worker. It references cached blocks where the
// prefix is known, allocates the rest and commits them, and returns the
// indexes into s.Blocks() whose K/V the caller must fill (blocks that were
// not already present). Only whole blocks are imported, and s must not end
// in a partial block.
func (c *Cache) Import(s *Seq, tokens []tokenid.ID) ([]int, error) {
	if s.numTokens%c.bs != 0 {
		return nil, fmt.Errorf("kvcache: import after a partial block (%d tokens held)", s.numTokens)
	}
	full := len(tokens) / c.bs
	c.Acquire(s, tokens[:full*c.bs])
	start := len(s.blocks)
	if start >= full {
		return nil, nil
	}
	if err := c.Allocate(s, full*c.bs); err != nil {
		return nil, err
	}
	before := append([]BlockID(nil), s.blocks[start:full]...)
	c.Commit(s, tokens[:full*c.bs])
	var fill []int
	for i, b := range before {
		if s.blocks[start+i] == b {
			fill = append(fill, start+i)
		}
	}
	return fill, nil
}

// Block describes physical block b.
func (c *Cache) Block(b BlockID) (BlockInfo, bool) {
	if b < 0 || int(b) >= c.numBlocks {
		return BlockInfo{}, false
	}
	if int(b) >= len(c.meta) {
		return BlockInfo{}, true
	}
	m := &c.meta[b]
	info := BlockInfo{Ref: int(m.ref), Hashed: m.hashed}
	if m.hashed {
		info.Hash = m.hash
	}
	if m.committed {
		info.Tokens = c.tokens[int(b)*c.bs : (int(b)+1)*c.bs : (int(b)+1)*c.bs]
	}
	return info, true
}

// Reset drops every cached block (vLLM's reset_prefix_cache) and emits
// AllBlocksCleared. It fails with ErrInUse while any block is referenced.
func (c *Cache) Reset() error {
	if c.used > 0 {
		return fmt.Errorf("%w: %d blocks", ErrInUse, c.used)
	}
	for b := c.lruHead; b != noBlock; {
		m := &c.meta[b]
		next := m.next
		m.prev, m.next = noBlock, noBlock
		m.hashed, m.committed = false, false
		c.free = append(c.free, b)
		b = next
	}
	c.lruHead, c.lruTail = noBlock, noBlock
	c.cached = 0
	clear(c.index)
	if c.sink != nil {
		c.sink.AllBlocksCleared()
	}
	return nil
}

func (c *Cache) lruPush(b BlockID) {
	m := &c.meta[b]
	m.prev, m.next = c.lruTail, noBlock
	if c.lruTail != noBlock {
		c.meta[c.lruTail].next = b
	} else {
		c.lruHead = b
	}
	c.lruTail = b
}

func (c *Cache) lruRemove(b BlockID) {
	m := &c.meta[b]
	if m.prev != noBlock {
		c.meta[m.prev].next = m.next
	} else {
		c.lruHead = m.next
	}
	if m.next != noBlock {
		c.meta[m.next].prev = m.prev
	} else {
		c.lruTail = m.prev
	}
	m.prev, m.next = noBlock, noBlock
}

// EvictionOrder returns the cached blocks from next-to-evict to last. It is
// O(cached) and meant for tests and debugging.
func (c *Cache) EvictionOrder() []BlockID {
	var out []BlockID
	for b := c.lruHead; b != noBlock; b = c.meta[b].next {
		out = append(out, b)
	}
	return out
}

// Validate checks the cache's internal consistency against the sequences
// that are supposed to hold its blocks: refcounts equal the number of
// references from seqs, cached blocks are exactly the hashed unreferenced
// ones, the index points at hashed blocks and counters add up. It is O(n)
// and meant for tests.
func (c *Cache) Validate(seqs ...*Seq) error {
	refs := make([]int32, len(c.meta))
	for _, s := range seqs {
		if len(s.blocks) != (s.numTokens+c.bs-1)/c.bs {
			return fmt.Errorf("seq holds %d blocks for %d tokens", len(s.blocks), s.numTokens)
		}
		for _, b := range s.blocks {
			if b < 0 || int(b) >= len(c.meta) {
				return fmt.Errorf("seq holds untouched block %d", b)
			}
			refs[b]++
		}
	}
	inLRU := make([]bool, len(c.meta))
	n := 0
	prev := noBlock
	for b := c.lruHead; b != noBlock; b = c.meta[b].next {
		if inLRU[b] {
			return fmt.Errorf("LRU cycle at block %d", b)
		}
		if c.meta[b].prev != prev {
			return fmt.Errorf("LRU back link broken at block %d", b)
		}
		inLRU[b] = true
		prev = b
		n++
	}
	if prev != c.lruTail {
		return fmt.Errorf("LRU tail %d, walked to %d", c.lruTail, prev)
	}
	if n != c.cached {
		return fmt.Errorf("cached counter %d, LRU holds %d", c.cached, n)
	}
	inFree := make([]bool, len(c.meta))
	for _, b := range c.free {
		if inFree[b] {
			return fmt.Errorf("block %d twice in free list", b)
		}
		inFree[b] = true
	}
	used := 0
	for b := range c.meta {
		m := &c.meta[b]
		if m.ref != refs[b] {
			return fmt.Errorf("block %d ref %d, held %d times", b, m.ref, refs[b])
		}
		switch {
		case m.ref > 0:
			used++
			if inLRU[b] || inFree[b] {
				return fmt.Errorf("in-use block %d is evictable or free", b)
			}
		case m.hashed:
			if !inLRU[b] {
				return fmt.Errorf("cached block %d not in LRU", b)
			}
		default:
			if !inFree[b] {
				return fmt.Errorf("unreferenced block %d lost (neither free nor cached)", b)
			}
		}
		if m.hashed {
			if e, ok := c.index[m.hash.Uint64()]; !ok || e != BlockID(b) {
				return fmt.Errorf("hashed block %d missing from index", b)
			}
		}
	}
	if used != c.used {
		return fmt.Errorf("used counter %d, counted %d", c.used, used)
	}
	for k, b := range c.index {
		if !c.meta[b].hashed || c.meta[b].hash.Uint64() != k {
			return fmt.Errorf("index entry %x points at block %d which does not hold it", k, b)
		}
	}
	return nil
}
