package kvcache

import (
	"fmt"

	"github.com/tandemllm/tandem/tokenid"
)

// Tier is where a cached block lives: G1 is the engine's block pool, G2
// host memory, G3 local disk. Lower tiers hold blocks the pool evicted, so
// a later prompt can bring them back (onboard) instead of recomputing them,
// as Dynamo's KV Block Manager, LMCache and SGLang's HiCache do.
type Tier uint8

const (
	TierG1 Tier = iota // the engine's pool (device memory)
	TierG2             // host memory
	TierG3             // local disk
	NumTiers
)

func (t Tier) String() string {
	switch t {
	case TierG1:
		return "g1"
	case TierG2:
		return "g2"
	case TierG3:
		return "g3"
	}
	return "unknown"
}

// Medium is the tier's name in KV events' medium field as vLLM writes it:
// "GPU" for the block pool and "CPU" for host memory
// (vllm/v1/kv_offload/mediums.py: GPULoadStoreSpec, CPULoadStoreSpec), and
// "STORAGE" for file tiers (vLLM's OffloadingConnector storage tier, which
// superseded its "FS" and "OBJ" names).
func (t Tier) Medium() string {
	switch t {
	case TierG2:
		return "CPU"
	case TierG3:
		return "STORAGE"
	}
	return "GPU"
}

// SGLangMedium is the tier's medium as SGLang's HiCache writes it
// (python/sglang/srt/mem_cache: "GPU", "CPU_PINNED", "DISK").
func (t Tier) SGLangMedium() string {
	switch t {
	case TierG2:
		return "CPU_PINNED"
	case TierG3:
		return "DISK"
	}
	return "GPU"
}

// TierOfMedium maps a KV event's medium to a tier: None and "GPU" are the
// device pool; host-memory names ("CPU", SGLang's "CPU_PINNED") are G2;
// storage names ("DISK", "FS", "OBJ", "STORAGE", "EXTERNAL") are G3.
// Unknown names report false.
func TierOfMedium(m string) (Tier, bool) {
	switch m {
	case "", "GPU", "gpu":
		return TierG1, true
	case "CPU", "CPU_PINNED", "cpu":
		return TierG2, true
	case "DISK", "FS", "OBJ", "STORAGE", "EXTERNAL", "disk":
		return TierG3, true
	}
	return TierG1, false
}

// TierSink is an EventSink that also hears about the lower tiers. A Cache
// with tiers reports through it when its Sink implements it.
type TierSink interface {
	// TierStored reports blocks that entered tier t (a contiguous run or a
	// single block; parent is the hash of the block before blocks[0]).
	TierStored(t Tier, parent BlockHash, blocks []BlockHash, tokens []tokenid.ID)
	// TierRemoved reports blocks that left tier t.
	TierRemoved(t Tier, blocks []BlockHash)
}

// TierConfig sizes a cache's lower tiers. A zero capacity turns that tier
// off; both zero is a cache without tiers.
type TierConfig struct {
	// BlockBytes is what one block occupies in a lower tier: its K/V
	// bytes. Capacities are whole blocks of this size.
	BlockBytes int64
	// HostBytes bounds G2 (--kv-offload-host-bytes).
	HostBytes int64
	// DiskBytes bounds G3 (--kv-offload-disk-bytes).
	DiskBytes int64
	// Store, if set, holds the blocks' payloads (a real engine's K/V
	// copies). nil keeps bookkeeping only: a simulated engine, whose
	// blocks have no bytes, models the copies' cost instead.
	Store PayloadStore
	// Shared, if set, is a disk tier other workers of the host write too
	// (one directory several workers read): a block this cache's own tiers
	// miss is onboarded from it when it holds the block, so a prefix one
	// worker computed is copied, not recomputed, by another.
	Shared SharedTier
	// SharedHost, if set, is a host-memory pool the workers of a host
	// share (a shared-memory segment several workers read): the cache
	// records its G2 blocks there, and a block its own tiers miss that
	// the pool holds is onboarded from it over the host link, as a G2
	// block. Each worker's part stays bounded by HostBytes.
	SharedHost SharedHostRecorder
}

// SharedHostRecorder is SharedRecorder for a shared host-memory tier: the
// cache reports each block entering and leaving its own G2; the answers
// say whether the pool's content changed (first copy in, last copy out),
// and only those changes are published as G2 events (a router applies
// them to every worker of the pool, kvindex.Index.SetShareGroupTier).
type SharedHostRecorder interface {
	SharedTier
	StoredG2(h BlockHash) (first bool)
	RemovedG2(h BlockHash) (last bool)
}

// SharedTier answers whether another worker's copy of a block is there to
// be read (AcquireTiers then onboards it as a G3 block through fill).
type SharedTier interface {
	Has(h BlockHash) bool
}

// SharedRecorder is a SharedTier the caches fill themselves: a simulated
// host disk (the mocker's), which has no files for Has to find. A cache
// reports each block entering and leaving its own G3 to it; the answers
// say whether the shared tier's content changed (the block's first copy
// came in, its last went out). The cache's G3 events then follow the
// shared tier's content, not its own share of it: a router that knows
// which workers share the tier (kvindex.Index.SetShareGroup) applies them
// to every one of them, so each change is published once, by the worker
// that made it.
type SharedRecorder interface {
	SharedTier
	StoredG3(h BlockHash) (first bool)
	RemovedG3(h BlockHash) (last bool)
}

// noteG3 tells a recording shared tier that h entered (in) or left G3 and
// reports whether the change is to be published as a G3 event: always
// without a recording shared tier, else only when the shared tier's
// content changed.
func (t *tiers) noteG3(h BlockHash, in bool) bool {
	r, ok := t.cfg.Shared.(SharedRecorder)
	if !ok {
		return true
	}
	if in {
		return r.StoredG3(h)
	}
	return r.RemovedG3(h)
}

// noteG2 is noteG3 for the shared host pool: whether h entering (in) or
// leaving G2 is to be published.
func (t *tiers) noteG2(h BlockHash, in bool) bool {
	r := t.cfg.SharedHost
	if r == nil {
		return true
	}
	if in {
		return r.StoredG2(h)
	}
	return r.RemovedG2(h)
}

// note tells tier dst's shared pool, if any, that h entered (in) or left
// it, and reports whether to publish the change.
func (t *tiers) note(dst Tier, h BlockHash, in bool) bool {
	switch dst {
	case TierG2:
		return t.noteG2(h, in)
	case TierG3:
		return t.noteG3(h, in)
	}
	return true
}

// sharedHas reports whether a shared pool holds h and which: the host
// pool first (the faster copy), then the disk.
func (t *tiers) sharedHas(h BlockHash) (Tier, bool) {
	if t.cfg.SharedHost != nil && t.cfg.SharedHost.Has(h) {
		return TierG2, true
	}
	if t.cfg.Shared != nil && t.cfg.Shared.Has(h) {
		return TierG3, true
	}
	return TierG1, false
}

// PayloadStore moves real K/V bytes between the pool and the lower tiers.
// The cache calls it from its owner goroutine; an implementation that does
// slow work (a disk write) queues it rather than doing it in the call.
type PayloadStore interface {
	// Offload copies pool block b's K/V out of the pool before the block
	// is reused, for hash h entering tier t. An error means the copy could
	// not be taken: the block is then not offloaded (it will be
	// recomputed).
	Offload(t Tier, h BlockHash, b BlockID) error
	// Demote moves h's payload from G2 to G3 (false: not kept).
	Demote(h BlockHash) bool
	// Drop forgets h's payload in tier t.
	Drop(t Tier, h BlockHash)
}

// TierStats counts lower-tier activity.
type TierStats struct {
	Blocks     [NumTiers]int    // blocks held now (G1: cached + in use hashed)
	Bytes      [NumTiers]int64  // bytes held now in G2 and G3
	Capacity   [NumTiers]int    // blocks each lower tier may hold
	Offloaded  [NumTiers]uint64 // blocks written into the tier
	Onboarded  [NumTiers]uint64 // blocks brought back to G1 from the tier
	Dropped    [NumTiers]uint64 // blocks evicted out of the tier for good
	OffloadErr uint64           // offloads refused by the payload store
	LoadErr    uint64           // onboards whose copy could not be read back (recomputed)
	// SharedOnboarded counts blocks onboarded from another worker's copy
	// in a shared tier (also counted in Onboarded of its tier).
	SharedOnboarded uint64
}

type tierEntry struct {
	hash, parent BlockHash
	tokens       []tokenid.ID
	tier         Tier
	prev, next   *tierEntry
}

type tierLRU struct {
	head, tail *tierEntry // head is evicted first
	n, cap     int
}

func (l *tierLRU) push(e *tierEntry) {
	e.prev, e.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = e
	} else {
		l.head = e
	}
	l.tail = e
	l.n++
}

func (l *tierLRU) remove(e *tierEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
	l.n--
}

// tiers is the lower tiers' bookkeeping: which hashes G2 and G3 hold, each
// an LRU bounded in blocks. A block is in at most one lower tier; it may
// also be in the pool (onboarding copies, it does not move), so evicting
// it from the pool again costs no second copy.
type tiers struct {
	cfg   TierConfig
	m     map[uint64]*tierEntry
	lru   [NumTiers]tierLRU // G2 and G3 used
	stats TierStats
	spare []*tierEntry
	one   [1]BlockHash
}

func newTiers(cfg TierConfig) (*tiers, error) {
	if cfg.HostBytes < 0 || cfg.DiskBytes < 0 || cfg.BlockBytes < 0 {
		return nil, fmt.Errorf("kvcache: negative tier size (host %d, disk %d, block %d bytes)", cfg.HostBytes, cfg.DiskBytes, cfg.BlockBytes)
	}
	if cfg.HostBytes == 0 && cfg.DiskBytes == 0 {
		return nil, nil
	}
	if cfg.BlockBytes <= 0 {
		return nil, fmt.Errorf("kvcache: tiers need the block's size in bytes")
	}
	if cfg.SharedHost != nil && cfg.HostBytes < cfg.BlockBytes {
		return nil, fmt.Errorf("kvcache: a shared host tier needs a host tier of at least one block (%d bytes)", cfg.BlockBytes)
	}
	t := &tiers{cfg: cfg, m: make(map[uint64]*tierEntry)}
	t.lru[TierG2].cap = int(min(cfg.HostBytes/cfg.BlockBytes, 1<<31-1))
	t.lru[TierG3].cap = int(min(cfg.DiskBytes/cfg.BlockBytes, 1<<31-1))
	if t.lru[TierG2].cap == 0 && t.lru[TierG3].cap == 0 {
		return nil, fmt.Errorf("kvcache: tiers of %d and %d bytes hold no block of %d bytes", cfg.HostBytes, cfg.DiskBytes, cfg.BlockBytes)
	}
	t.stats.Capacity[TierG2], t.stats.Capacity[TierG3] = t.lru[TierG2].cap, t.lru[TierG3].cap
	return t, nil
}

func (t *tiers) lookup(h BlockHash) *tierEntry {
	e := t.m[h.Uint64()]
	if e == nil || e.hash != h {
		return nil
	}
	return e
}

// sink returns the cache's TierSink, if any.
func (c *Cache) tierSink() TierSink {
	if ts, ok := c.sink.(TierSink); ok {
		return ts
	}
	return nil
}

// offload takes pool block b, being evicted, into the highest lower tier
// with room. A block already held below is only refreshed.
func (c *Cache) offload(b BlockID) {
	t := c.tiers
	m := &c.meta[b]
	if e := t.lookup(m.hash); e != nil {
		t.lru[e.tier].remove(e)
		t.lru[e.tier].push(e)
		return
	}
	dst := TierG2
	if t.lru[TierG2].cap == 0 {
		dst = TierG3
	}
	if t.cfg.Store != nil {
		if err := t.cfg.Store.Offload(dst, m.hash, b); err != nil {
			t.stats.OffloadErr++
			return
		}
	}
	t.makeRoom(c, dst)
	var e *tierEntry
	if n := len(t.spare); n > 0 {
		e, t.spare = t.spare[n-1], t.spare[:n-1]
	} else {
		e = &tierEntry{tokens: make([]tokenid.ID, c.bs)}
	}
	e.hash, e.parent, e.tier = m.hash, m.parent, dst
	copy(e.tokens, c.tokens[int(b)*c.bs:(int(b)+1)*c.bs])
	t.m[m.hash.Uint64()] = e
	t.lru[dst].push(e)
	t.stats.Offloaded[dst]++
	publish := t.note(dst, e.hash, true)
	if s := c.tierSink(); s != nil && publish {
		t.one[0] = e.hash
		s.TierStored(dst, e.parent, t.one[:], e.tokens)
	}
}

// makeRoom evicts tier dst's least recently used block if it is full: out
// of G2 into G3 when G3 exists, otherwise (and out of G3) for good.
func (t *tiers) makeRoom(c *Cache, dst Tier) {
	l := &t.lru[dst]
	if l.n < l.cap {
		return
	}
	e := l.head
	l.remove(e)
	sink := c.tierSink()
	// Out of a shared tier's part is out of the shared tier when it was
	// the last copy (note).
	if publish := t.note(dst, e.hash, false); sink != nil && publish {
		t.one[0] = e.hash
		sink.TierRemoved(dst, t.one[:])
	}
	if dst == TierG2 && t.lru[TierG3].cap > 0 && (t.cfg.Store == nil || t.cfg.Store.Demote(e.hash)) {
		t.makeRoom(c, TierG3)
		e.tier = TierG3
		t.lru[TierG3].push(e)
		t.stats.Offloaded[TierG3]++
		if publish := t.noteG3(e.hash, true); sink != nil && publish {
			t.one[0] = e.hash
			sink.TierStored(TierG3, e.parent, t.one[:], e.tokens)
		}
		return
	}
	if t.cfg.Store != nil {
		t.cfg.Store.Drop(dst, e.hash)
	}
	t.stats.Dropped[dst]++
	delete(t.m, e.hash.Uint64())
	t.spare = append(t.spare, e)
}

// dropEntry forgets a lower-tier block whose copy cannot be read back.
func (c *Cache) dropEntry(e *tierEntry) {
	t := c.tiers
	t.lru[e.tier].remove(e)
	delete(t.m, e.hash.Uint64())
	publish := t.note(e.tier, e.hash, false)
	if s := c.tierSink(); s != nil && publish {
		t.one[0] = e.hash
		s.TierRemoved(e.tier, t.one[:])
	}
	if t.cfg.Store != nil {
		t.cfg.Store.Drop(e.tier, e.hash)
	}
	t.stats.Dropped[e.tier]++
	t.spare = append(t.spare, e)
}

// Onboard is one block brought back into the pool from a lower tier: the
// caller fills pool block Block with hash Hash's K/V from tier From before
// computing past it.
type Onboard struct {
	Index int // index into the Seq's Blocks()
	Block BlockID
	Hash  BlockHash
	From  Tier
	// Shared: read from the shared tier (another worker's copy).
	Shared bool
}

// AcquireTiers is Acquire followed by onboarding: blocks after the pool's
// prefix that a lower tier holds are allocated in the pool, filled, and
// committed. fill, if not nil, copies one block's K/V into the pool (a real
// engine; a simulated one passes nil and charges the copy's time instead);
// a block it fails on (a corrupt or unreadable copy) is dropped from its
// tier and it and everything after it is left to be recomputed. It returns
// the prefix length in tokens (pool hit plus onboarded) and the onboarded
// blocks; dst is reused. Without tiers, or when the pool has no room, it is
// Acquire.
func (c *Cache) AcquireTiers(s *Seq, tokens []tokenid.ID, dst []Onboard, fill func(Onboard) error) (int, []Onboard) {
	dst = dst[:0]
	hit := c.Acquire(s, tokens)
	if c.tiers == nil || c.noPrefix || len(s.blocks)*c.bs != hit {
		return hit, dst
	}
	full := len(tokens) / c.bs
	start := len(s.blocks)
	n := 0
	for i := start; i < full; i++ {
		c.hashUpTo(s, tokens, i+1)
		e := c.tiers.lookup(s.hashes[i])
		if e == nil {
			if _, ok := c.tiers.sharedHas(s.hashes[i]); !ok {
				break
			}
			n++
			continue
		}
		// Most recently used now, so the offloads the allocation below
		// causes evict other blocks first.
		c.tiers.lru[e.tier].remove(e)
		c.tiers.lru[e.tier].push(e)
		n++
	}
	if n == 0 {
		return hit, dst
	}
	if err := c.Allocate(s, (start+n)*c.bs); err != nil {
		return hit, dst
	}
	for i := start; i < start+n; i++ {
		e := c.tiers.lookup(s.hashes[i])
		o := Onboard{Index: i, Block: s.blocks[i], Hash: s.hashes[i]}
		if e != nil {
			o.From = e.tier
		} else if from, ok := c.tiers.sharedHas(s.hashes[i]); ok {
			o.From, o.Shared = from, true
		} else {
			// Pushed out of its tier by this very allocation's offloads
			// (a tier smaller than the prefix): the rest is recomputed.
			break
		}
		if fill != nil {
			if err := fill(o); err != nil {
				c.tiers.stats.LoadErr++
				if e != nil {
					c.dropEntry(e)
				}
				break
			}
		}
		c.tiers.stats.Onboarded[o.From]++
		if o.Shared {
			c.tiers.stats.SharedOnboarded++
		}
		dst = append(dst, o)
	}
	end := start + len(dst)
	c.Commit(s, tokens[:end*c.bs])
	for k := range dst {
		dst[k].Block = s.blocks[dst[k].Index]
	}
	return end * c.bs, dst
}

// MatchTiers is Match for every tier: how many leading tokens the pool
// holds, then how many of the tokens right after them G2 and G3 hold (a run
// of blocks, each in either; a shared pool's blocks count as its tier, as
// AcquireTiers onboards them). It hashes tokens on every call.
func (c *Cache) MatchTiers(tokens []tokenid.ID) (g1 int, lower [NumTiers]int) {
	if c.noPrefix {
		return 0, lower
	}
	var parent BlockHash
	i := 0
	for ; (i+1)*c.bs <= len(tokens); i++ {
		h := c.hasher.Hash(parent, tokens[i*c.bs:(i+1)*c.bs])
		if _, ok := c.lookup(h); !ok {
			if c.tiers == nil {
				break
			}
			e := c.tiers.lookup(h)
			if e != nil {
				lower[e.tier] += c.bs
			} else if from, ok := c.tiers.sharedHas(h); ok {
				lower[from] += c.bs
			} else {
				return g1, lower
			}
		} else if lower[TierG2]+lower[TierG3] == 0 {
			g1 += c.bs
		} else {
			lower[TierG2] += c.bs // in the pool past a gap: no copy, count it with the nearest tier
		}
		parent = h
	}
	return g1, lower
}

// TierStats returns the tiers' counters; the zero value without tiers.
func (c *Cache) TierStats() TierStats {
	if c.tiers == nil {
		return TierStats{}
	}
	st := c.tiers.stats
	st.Blocks[TierG1] = len(c.index)
	for t := TierG2; t < NumTiers; t++ {
		st.Blocks[t] = c.tiers.lru[t].n
		st.Bytes[t] = int64(c.tiers.lru[t].n) * c.tiers.cfg.BlockBytes
	}
	return st
}

// HasTiers reports whether the cache has lower tiers.
func (c *Cache) HasTiers() bool { return c.tiers != nil }
