package kvindex

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/blockhash"
	"github.com/tandemllm/tandem/kvcache"
	"github.com/tandemllm/tandem/planes/kvevents/event"
)

// DefaultMaxBlocks bounds an index when Config.MaxBlocks is 0: about 4.2 M
// residences (docs/benchmarks/router.md has the memory per residence),
// enough for ~170 workers of 25k blocks each. Dynamo's event indexer has no bound at all
// (ai-dynamo/dynamo#4429); its approximate one defaults to 2^20.
const DefaultMaxBlocks = 1 << 22

// DefaultPruneTarget is the fraction of MaxBlocks a full index is pruned down
// to. Pruning in batches amortizes the walk; Dynamo uses 0.8.
const DefaultPruneTarget = 0.9

// ErrUnknownWorker is returned for events of a worker never added.
var ErrUnknownWorker = errors.New("kvindex: unknown worker")

// ErrBlockSize is returned when an engine's block size is not a multiple of
// the index's: such blocks cannot be cut into whole index blocks, and
// guessing would make routing fail silently (Dynamo PR #1233).
var ErrBlockSize = errors.New("kvindex: engine block size is not a multiple of the index block size")

// Config configures an Index.
type Config struct {
	// Name labels the metrics ("events", "approx").
	Name string
	// BlockSize is the index's block size in tokens; request hashes must use
	// the same. Engine block sizes must be multiples of it.
	BlockSize int
	// MaxBlocks bounds the residences (worker, block) held; past it the least
	// recently used are pruned. 0 selects DefaultMaxBlocks.
	MaxBlocks int
	// PruneTarget is the fraction of MaxBlocks pruning goes down to; 0
	// selects DefaultPruneTarget.
	PruneTarget float64
	// TTL, when positive, makes this an approximate index: entries expire
	// TTL after they were last stored (see Expire), and lookups do not
	// refresh them, because what they record is a routing decision, not
	// evidence that the block is still cached.
	TTL time.Duration
	// Now is the clock; nil selects time.Now.
	Now func() time.Time
	// Registerer receives the index's metrics when not nil.
	Registerer prometheus.Registerer
	// LowerTiers indexes blocks the engines keep below their GPU pool too
	// (BlockStored/BlockRemoved whose medium is host memory or storage,
	// with token ids): a worker then matches a prefix while it holds each
	// block in some tier, since onboarding beats recomputing. Each tier's
	// copy is its own residence, so a block moving between tiers is never
	// lost from the index. Off, such events are ignored.
	LowerTiers bool
	// NoDisk, with LowerTiers, leaves out the disk tier (G3): an index of
	// what a worker holds in its pool or host memory, whose difference with
	// a LowerTiers index's answer is what it must read from disk.
	NoDisk bool
}

// Overlap is one worker's answer to a lookup.
type Overlap struct {
	Worker string
	// Tag is the caller's number for the worker (SetTag), -1 if none: it
	// spares a caller with its own worker table a string lookup per answer.
	Tag int32
	// Blocks is how many leading blocks of the request the worker holds.
	Blocks int
}

// ApplyStats counts what one Apply did, so the caller can tell a healthy
// stream (StoredEvents > 0) from a broken one.
type ApplyStats struct {
	StoredEvents      int // BlockStored events applied
	Stored            int // index blocks added or refreshed
	Removed           int // index blocks removed by BlockRemoved
	Cleared           int // AllBlocksCleared events
	ParentMissing     int // BlockStored dropped: parent hash unknown
	BlockMissing      int // BlockRemoved hashes not held
	Invalid           int // malformed events (token count ≠ blocks × size)
	BlockSizeMismatch int // block size not a multiple of the index's
	Ignored           int // events for other tiers (CPU, disk, …)
	Unknown           int // unknown event types
}

type worker struct {
	id   string
	slot uint32
	// engineBS is the engine's block size in tokens, used when an event does
	// not carry one.
	engineBS int
	// engine maps an engine block hash to the last index block it produced:
	// BlockRemoved carries only engine hashes, and the engine's algorithm or
	// PYTHONHASHSEED must not matter.
	engine table[uint32]
	blocks int
	// fp is the worker's term in a hashEntry's set fingerprint.
	fp  uint16
	tag int32
	// share names the worker's shared lower tiers (SetShareGroupTier),
	// by tier; "" if none.
	share [kvcache.NumTiers]string
}

// hashEntry heads the chain of one hash's residences. n and fp summarize
// the set of workers on the chain (count, and a sum of per-worker 16-bit
// mixes), so a lookup can tell in O(1) that block i is held by exactly the
// workers that held block i-1, the common case for a prefix, and skip the
// walk.
type hashEntry struct {
	head uint32
	n    uint16 // residences; saturated means "unknown, walk"
	// fp is the workers' 15-bit fingerprint sum (fpMask) and fpLower,
	// set while a residence on the chain is below the pool (host
	// memory, disk): LookupTiers skips a chain of pool residences alone
	// whose workers are the previous chain's, as walk skips any such
	// chain, without widening the entry.
	fp uint16
}

const (
	fpLower = 1 << 15
	fpMask  = fpLower - 1
)

const nSaturated = ^uint16(0)

// bigChain is the residence count from which a hash keeps a worker array.
const bigChain = 8

// workerFP mixes a slot into 15 bits (hashEntry.fp's top bit is
// fpLower). The mix is not linear: a multiplicative hash's top bits are
// nearly so, and slot pairs with equal sums ({0, 3} and {1, 2}) then had
// equal fingerprint sums, which made a walk skip a chain held by other
// workers than the chain before.
func workerFP(slot uint32) uint16 {
	// splitmix64's finalizer: every output bit depends on every input bit.
	z := uint64(slot) + 1
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return uint16((z ^ z>>31) >> 49)
}

// Index maps Tandem block hashes to the workers holding them. It is safe for
// concurrent use: lookups share a read lock, event application takes the
// write lock once per batch.
//
// Each residence (worker, block) is a node in a slab. Nodes of the same hash
// are chained, and heads maps a hash to its chain, so a lookup costs one map
// probe per request block plus one step per matching residence: workers that
// hold none of the prompt never enter the computation, however many there
// are.
type Index struct {
	name     string
	bs       int
	max      int
	target   int
	ttlTicks uint32
	// lowerTiers: see Config.LowerTiers.
	lowerTiers bool
	noDisk     bool
	now        func() time.Time
	epoch      time.Time

	mu    sync.RWMutex
	nodes slab
	heads table[hashEntry]
	// Hashes with at least bigChain residences also keep their workers in
	// a compact array, so a lookup reads one sequential array instead of
	// chasing a chain spread over the slab: a system prompt held by a
	// thousand workers is a thousand cache misses otherwise.
	big        table[uint32] // hash → index in groups
	groups     [][]uint32
	freeGroups []uint32
	oldest     uint32    // a lower bound of the oldest stamp, so Expire is O(1) when nothing is due
	workers    []*worker // by slot; nil for a free slot
	// tags are the workers' tags by slot (-1: none), apart from the
	// workers so that LookupTags reads one dense array instead of one
	// worker struct per answer (a cache miss each, with a thousand).
	tags []int32
	byID map[string]uint32
	free []uint32
	// shares are the workers of each shared tier (SetShareGroupTier), by
	// slot.
	shares map[shareKey][]uint32
	hasher blockhash.Hasher // used under the write lock
	group  []uint64         // scratch for one event's hashes
	sink   uint64           // keeps the warming loads alive

	scratch sync.Pool
	st      counters
}

// New returns an empty index.
func New(cfg Config) (*Index, error) {
	if cfg.BlockSize <= 0 {
		return nil, fmt.Errorf("kvindex: block size must be positive, got %d", cfg.BlockSize)
	}
	if cfg.MaxBlocks < 0 || cfg.TTL < 0 || cfg.PruneTarget < 0 || cfg.PruneTarget >= 1 {
		return nil, fmt.Errorf("kvindex: invalid config (max blocks %d, ttl %v, prune target %v)", cfg.MaxBlocks, cfg.TTL, cfg.PruneTarget)
	}
	if cfg.MaxBlocks == 0 {
		cfg.MaxBlocks = DefaultMaxBlocks
	}
	if cfg.PruneTarget == 0 {
		cfg.PruneTarget = DefaultPruneTarget
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Name == "" {
		cfg.Name = "events"
	}
	ix := &Index{
		name:   cfg.Name,
		bs:     cfg.BlockSize,
		max:    cfg.MaxBlocks,
		target: int(float64(cfg.MaxBlocks) * cfg.PruneTarget),
		now:    cfg.Now,
		epoch:  cfg.Now(),
		nodes:  newSlab(),
		byID:   map[string]uint32{},

		lowerTiers: cfg.LowerTiers,
		noDisk:     cfg.NoDisk,
	}
	if cfg.TTL > 0 {
		ix.ttlTicks = uint32(max(1, cfg.TTL/time.Millisecond))
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(newCollector(ix)); err != nil {
			return nil, fmt.Errorf("kvindex: register metrics: %w", err)
		}
	}
	return ix, nil
}

// BlockSize is the index's block size in tokens.
func (ix *Index) BlockSize() int { return ix.bs }

// Ticks are milliseconds since the index was created, as uint32. Ages are
// differences modulo 2^32 ms (49.7 days): an entry unused for longer looks
// young again, which only delays its pruning.
func (ix *Index) tick() uint32 {
	return uint32(ix.now().Sub(ix.epoch) / time.Millisecond)
}

func age(stamp, now uint32) uint32 { return now - stamp }

// AddWorker registers a worker whose engine uses engineBlockSize tokens per
// block (0: the index's). Re-adding a worker updates its block size and
// keeps its blocks, which do not depend on it.
func (ix *Index) AddWorker(id string, engineBlockSize int) error {
	if engineBlockSize == 0 {
		engineBlockSize = ix.bs
	}
	if engineBlockSize < 0 || engineBlockSize%ix.bs != 0 {
		return fmt.Errorf("%w: worker %q uses %d, index uses %d", ErrBlockSize, id, engineBlockSize, ix.bs)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if slot, ok := ix.byID[id]; ok {
		ix.workers[slot].engineBS = engineBlockSize
		return nil
	}
	var slot uint32
	if n := len(ix.free); n > 0 {
		slot = ix.free[n-1]
		ix.free = ix.free[:n-1]
	} else {
		slot = uint32(len(ix.workers))
		ix.workers = append(ix.workers, nil)
		ix.tags = append(ix.tags, -1)
	}
	ix.workers[slot] = &worker{id: id, slot: slot, engineBS: engineBlockSize, fp: workerFP(slot), tag: -1}
	ix.tags[slot] = -1
	ix.byID[id] = slot
	return nil
}

// SetTag attaches the caller's number for the worker, returned in every
// Overlap; it reports whether the worker exists.
func (ix *Index) SetTag(id string, tag int32) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	slot, ok := ix.byID[id]
	if ok {
		ix.workers[slot].tag = tag
		ix.tags[slot] = tag
	}
	return ok
}

// RemoveWorker drops the worker and everything it holds.
func (ix *Index) RemoveWorker(id string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	slot, ok := ix.byID[id]
	if !ok {
		return
	}
	w := ix.workers[slot]
	ix.clearLocked(w)
	ix.leaveShareLocked(w, kvcache.TierG2)
	ix.leaveShareLocked(w, kvcache.TierG3)
	delete(ix.byID, id)
	ix.workers[slot] = nil
	ix.tags[slot] = -1
	ix.free = append(ix.free, slot)
}

// ClearWorker drops everything the worker holds and keeps it registered: its
// engine restarted, cleared its cache, or its stream became untrustworthy.
func (ix *Index) ClearWorker(id string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if slot, ok := ix.byID[id]; ok {
		ix.clearLocked(ix.workers[slot])
	}
}

func (ix *Index) clearLocked(w *worker) {
	w.engine.each(func(_ uint64, last uint32) { ix.removeGroup(w, last) })
	if w.blocks > 0 {
		// Pruning can orphan the leading blocks of a multi-block engine
		// block (the map points at its last block only); find them the slow
		// way, which only clearing ever needs.
		for i := 0; i < ix.nodes.used; i++ {
			if ix.nodes.at(uint32(i)).worker == w.slot {
				ix.removeNode(uint32(i))
			}
		}
	}
	w.engine = table[uint32]{} // give a large table's memory back
}

// Apply applies a batch of one worker's events, in order.
func (ix *Index) Apply(workerID string, events []event.Event) (ApplyStats, error) {
	var st ApplyStats
	ix.mu.Lock()
	defer ix.mu.Unlock()
	slot, ok := ix.byID[workerID]
	if !ok {
		return st, fmt.Errorf("%w: %q", ErrUnknownWorker, workerID)
	}
	w := ix.workers[slot]
	now := ix.tick()
	for i := range events {
		ev := &events[i]
		switch ev.Type {
		case event.TypeBlockStored:
			if members := ix.sharedBy(w, ev); members != nil {
				for _, m := range members {
					ix.applyStored(ix.workers[m], w, ev, now, &st)
				}
				continue
			}
			ix.applyStored(w, w, ev, now, &st)
		case event.TypeBlockRemoved:
			if members := ix.sharedBy(w, ev); members != nil {
				for _, m := range members {
					ix.applyRemoved(ix.workers[m], ev, &st)
				}
				continue
			}
			ix.applyRemoved(w, ev, &st)
		case event.TypeAllBlocksCleared:
			ix.clearLocked(w)
			st.Cleared++
		default:
			st.Unknown++
		}
	}
	ix.pruneLocked()
	ix.st.add(&st)
	return st, nil
}

// tierSalt keys a lower tier's residences apart from the pool's in a
// worker's engine-hash map: the same engine hash may be in the pool and in
// host memory at once, and each copy comes and goes on its own. The pool's
// salt is zero, so an index without tiers keys as it always did.
var tierSalt = [kvcache.NumTiers]uint64{0, 0x9e3779b97f4a7c15, 0xc2b2ae3d27d4eb4f}

// eventTier reports which tier an event concerns and whether the index
// takes it: the GPU pool always; lower tiers (CPU, disk, …) with
// LowerTiers, and only with token ids (vLLM's placeholder offload events
// have none, and their hashes are not the index's).
func (ix *Index) eventTier(ev *event.Event) (kvcache.Tier, bool) {
	t, ok := kvcache.TierOfMedium(ev.Medium)
	if !ok || (t != kvcache.TierG1 && (!ix.lowerTiers || (t == kvcache.TierG3 && ix.noDisk) || (ev.Type == event.TypeBlockStored && len(ev.TokenIDs) == 0))) {
		return t, false
	}
	return t, true
}

// parentKey finds the parent block's key in w's engine map: in the child's
// own tier first, then in any other (a parent may sit in the pool while
// its child was offloaded, or the other way round).
func (ix *Index) parentKey(w *worker, t kvcache.Tier, parent uint64) (uint32, bool) {
	if pi, ok := w.engine.get(parent ^ tierSalt[t]); ok {
		return pi, true
	}
	if !ix.lowerTiers {
		return 0, false
	}
	for u := range kvcache.NumTiers {
		if u == t {
			continue
		}
		if pi, ok := w.engine.get(parent ^ tierSalt[u]); ok {
			return pi, true
		}
	}
	return 0, false
}

// SetShareGroup says that the worker's disk tier (G3) is one it shares
// with every other worker of the same group name (a host's shared
// directory or simulated disk): SetShareGroupTier for G3.
func (ix *Index) SetShareGroup(id, group string) bool {
	return ix.SetShareGroupTier(id, kvcache.TierG3, group)
}

// SetShareGroupTier says that the worker's lower tier t (G2: host memory,
// G3: disk) is one it shares with every other worker of the same group
// name for that tier (a host's shared-memory pool, directory or simulated
// disk): the engines of a group publish the shared tier's content, each
// change once, by the worker that made it (kvcache.SharedRecorder,
// kvcache.SharedHostRecorder), and the index applies a group member's
// events for tier t to every member, since each can onboard those blocks.
// A block in the shared tier is then a residence of each member (the
// memory per residence is unchanged; the residences are as many as the
// members). "" leaves the worker's group for t. Only with LowerTiers (and
// for G3 not with NoDisk, whose index ignores the disk); it reports
// whether the worker exists.
func (ix *Index) SetShareGroupTier(id string, t kvcache.Tier, group string) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	slot, ok := ix.byID[id]
	if !ok {
		return false
	}
	if t != kvcache.TierG2 && t != kvcache.TierG3 {
		return true
	}
	w := ix.workers[slot]
	if w.share[t] == group {
		return true
	}
	ix.leaveShareLocked(w, t)
	if group == "" || !ix.lowerTiers {
		return true
	}
	if ix.shares == nil {
		ix.shares = map[shareKey][]uint32{}
	}
	w.share[t] = group
	k := shareKey{t, group}
	members := ix.shares[k]
	// A worker that joins late (its record came after the others had
	// filled the pool, or it restarted) sees the blocks already there, and
	// the others see what it published before it was known to share: the
	// group's members hold one content, each as its own residences.
	now := ix.tick()
	for _, m := range members {
		ix.copyTierLocked(w, ix.workers[m], t, now)
	}
	if len(members) > 0 {
		ix.copyTierLocked(ix.workers[members[0]], w, t, now)
	}
	ix.shares[k] = append(members, slot)
	return true
}

// copyTierLocked gives to a residence of each of from's tier-t engine
// blocks that to does not already hold, with from's index blocks in
// order (a multi-block engine block's leading blocks first, as
// applyStored places them).
func (ix *Index) copyTierLocked(from, to *worker, t kvcache.Tier, now uint32) {
	if from == to {
		return
	}
	var chain []uint32
	var hashes []uint64
	from.engine.each(func(eh uint64, last uint32) {
		if kvcache.Tier(*ix.nodes.tierAt(last)) != t {
			return
		}
		if _, ok := to.engine.get(eh); ok {
			return
		}
		chain = chain[:0]
		for i := last; i != nilNode; {
			n := ix.nodes.at(i)
			if n.worker != from.slot || n.engine != eh {
				break
			}
			chain = append(chain, i)
			i = n.up
		}
		hashes = hashes[:0]
		for j := len(chain) - 1; j >= 0; j-- {
			hashes = append(hashes, ix.nodes.at(chain[j]).hash)
		}
		up := nilNode
		for _, h := range hashes {
			up = ix.insert(to, h, eh, up, now, t)
		}
		to.engine.put(eh, up)
	})
}

// shareKey names one shared tier: a group's host pool and disk are apart.
type shareKey struct {
	tier kvcache.Tier
	name string
}

func (ix *Index) leaveShareLocked(w *worker, t kvcache.Tier) {
	if w.share[t] == "" {
		return
	}
	// Its tier-t residences are the pool's, which it no longer reaches:
	// dropped, so that no lookup credits it with a copy it cannot make.
	var drop []uint64
	w.engine.each(func(eh uint64, last uint32) {
		if kvcache.Tier(*ix.nodes.tierAt(last)) == t {
			drop = append(drop, eh)
		}
	})
	for _, eh := range drop {
		if last, ok := w.engine.get(eh); ok {
			w.engine.del(eh)
			ix.removeGroup(w, last)
		}
	}
	k := shareKey{t, w.share[t]}
	ms := ix.shares[k]
	for j, s := range ms {
		if s == w.slot {
			ms[j] = ms[len(ms)-1]
			ms = ms[:len(ms)-1]
			break
		}
	}
	if len(ms) == 0 {
		delete(ix.shares, k)
	} else {
		ix.shares[k] = ms
	}
	w.share[t] = ""
}

// sharedBy returns the workers a lower-tier event of w applies to when w
// shares that tier (nil: w alone).
func (ix *Index) sharedBy(w *worker, ev *event.Event) []uint32 {
	if w.share[kvcache.TierG2] == "" && w.share[kvcache.TierG3] == "" {
		return nil
	}
	t, ok := ix.eventTier(ev)
	if !ok || t == kvcache.TierG1 || w.share[t] == "" {
		return nil
	}
	return ix.shares[shareKey{t, w.share[t]}]
}

// applyStored places ev's blocks as w's; from is the worker that published
// it (w, or another worker of w's shared tier), whose tiers are searched
// for the parent when w's hold none: w may never have seen the prefix
// the shared blocks continue.
func (ix *Index) applyStored(w, from *worker, ev *event.Event, now uint32, st *ApplyStats) {
	tier, ok := ix.eventTier(ev)
	if !ok {
		st.Ignored++
		return
	}
	salt := tierSalt[tier]
	ebs := ev.BlockSize
	if ebs <= 0 {
		ebs = w.engineBS
	}
	if ebs%ix.bs != 0 {
		st.BlockSizeMismatch++
		return
	}
	nb := len(ev.BlockHashes)
	// An event without token ids is indexed under its own hashes, which
	// must then be Tandem's (Tandem's engines with --kv-events-token-ids
	// false publish them): possible only when engine and index blocks
	// have one size, since a hash cannot be split.
	tokenless := len(ev.TokenIDs) == 0 && ebs == ix.bs
	if nb == 0 || (!tokenless && len(ev.TokenIDs) != nb*ebs) {
		st.Invalid++
		return
	}
	var parent uint64
	hasParent := false
	if ev.HasParent {
		pi, ok := ix.parentKey(w, tier, ev.ParentBlockHash.V)
		if !ok && from != w {
			pi, ok = ix.parentKey(from, tier, ev.ParentBlockHash.V)
		}
		if !ok && ev.ParentBlockHash.V == 0 {
			// 0 for "no parent" when no block 0 is known: publishers
			// written against the array form (vLLM look-alikes, llm-d's
			// simulators) write 0 where vLLM writes None.
			pi, ok = nilNode, true
		}
		if !ok {
			// The parent was evicted or pruned, or its event was lost. The
			// chain cannot be placed; the stream's seq numbers tell lost
			// events apart.
			st.ParentMissing++
			return
		}
		if pi != nilNode {
			p := ix.nodes.at(pi)
			parent, hasParent = p.hash, true
			p.stamp = now
		}
	}
	k := ebs / ix.bs
	// Hash everything first (pure computation), then warm the table slots
	// all inserts will touch, then insert: see warm.
	hs := ix.group[:0]
	if tokenless {
		for j := range nb {
			hs = append(hs, ev.BlockHashes[j].V)
		}
	} else {
		for r := range nb * k {
			parent = ix.hasher.Next(parent, hasParent, ev.TokenIDs[r*ix.bs:(r+1)*ix.bs])
			hasParent = true
			hs = append(hs, parent)
		}
	}
	ix.group = hs
	var sink uint64
	for j, h := range ev.BlockHashes {
		sink += w.engine.peek(h.V^salt) + ix.heads.peek(hs[j*k])
	}
	ix.sink += sink
	for j := range nb {
		g := hs[j*k : (j+1)*k]
		last := g[k-1]
		eh := ev.BlockHashes[j].V ^ salt
		if prev, dup := w.engine.get(eh); dup {
			if ix.nodes.at(prev).hash == last {
				// Re-announced (vLLM publishes a block once per copy): it is
				// fresh again.
				ix.refresh(prev, now)
				st.Stored += k
				continue
			}
			// Same engine hash, other content: the engine's hashing changed
			// under us (a restart with another seed). The new content wins.
			ix.removeGroup(w, prev)
		}
		up := nilNode
		for _, h := range g {
			up = ix.insert(w, h, eh, up, now, tier)
		}
		w.engine.put(eh, up)
		st.Stored += k
	}
	st.StoredEvents++
}

func (ix *Index) applyRemoved(w *worker, ev *event.Event, st *ApplyStats) {
	tier, ok := ix.eventTier(ev)
	if !ok {
		st.Ignored++
		return
	}
	salt := tierSalt[tier]
	if salt == 0 {
		ix.warmRemoval(w, ev.BlockHashes)
	}
	for _, h := range ev.BlockHashes {
		last, ok := w.engine.get(h.V ^ salt)
		if !ok {
			st.BlockMissing++
			continue
		}
		w.engine.del(h.V ^ salt)
		st.Removed += ix.removeGroup(w, last)
	}
}

// warmRemoval walks a removal's dependency chain (engine slot → node →
// chain entry) for all its blocks level by level, before the removal does
// it block by block. Each level's loads are independent of each other, so
// the CPU overlaps their cache misses instead of paying them one after the
// other: at a million residences the index is memory-latency bound, and an
// engine evicts blocks in batches.
func (ix *Index) warmRemoval(w *worker, hashes []event.Hash) {
	if len(hashes) < 2 {
		return
	}
	var sink uint64
	for _, h := range hashes {
		sink += w.engine.peek(h.V)
	}
	for _, h := range hashes {
		if i, ok := w.engine.get(h.V); ok {
			sink += uint64(ix.nodes.at(i).worker)
		}
	}
	for _, h := range hashes {
		if i, ok := w.engine.get(h.V); ok {
			sink += ix.heads.peek(ix.nodes.at(i).hash)
		}
	}
	ix.sink += sink
}

// Store records hashes (already chained, as from blockhash.Hasher.Append) as held by
// the worker. Approximate indexes use it for routing decisions, in-process
// engines for blocks they report directly. Storing again refreshes.
func (ix *Index) Store(workerID string, hashes []uint64) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	slot, ok := ix.byID[workerID]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownWorker, workerID)
	}
	w := ix.workers[slot]
	now := ix.tick()
	for _, h := range hashes {
		if i, ok := w.engine.get(h); ok {
			ix.refresh(i, now)
			continue
		}
		w.engine.put(h, ix.insert(w, h, h, nilNode, now, kvcache.TierG1))
	}
	ix.pruneLocked()
	return nil
}

// Expire drops approximate entries stored more than TTL ago and returns how
// many. It is one comparison when nothing is due, so callers run it on their
// hot path instead of keeping a goroutine; when something is due it sweeps
// the slab once.
func (ix *Index) Expire() int {
	if ix.ttlTicks == 0 {
		return 0
	}
	now := ix.tick()
	ix.mu.RLock()
	due := ix.nodes.live > 0 && age(ix.oldest, now) >= ix.ttlTicks
	ix.mu.RUnlock()
	if !due {
		return 0
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	n := 0
	oldest, maxAge := now, uint32(0)
	for i := range ix.nodes.used {
		nd := ix.nodes.at(uint32(i))
		if nd.worker == freeWorker {
			continue
		}
		switch a := age(nd.stamp, now); {
		case a >= ix.ttlTicks:
			ix.evict(uint32(i))
			n++
		case a > maxAge:
			oldest, maxAge = nd.stamp, a
		}
	}
	ix.oldest = oldest
	ix.st.expired.Add(uint64(n))
	return n
}

// Lookup appends, for each worker holding the request's first block, how many
// leading blocks of hashes it holds, and returns dst. Workers holding nothing
// are absent. Order is unspecified.
//
// Cost: one map probe per request block, plus one step per residence on the
// chains where the set of matching workers changes (and the first chain, to
// report them). Workers holding none of the prompt never enter it, and a
// system prompt held by every worker costs one probe per block, not one per
// worker per block.
func (ix *Index) Lookup(hashes []uint64, dst []Overlap) []Overlap {
	if len(hashes) == 0 {
		return dst
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	sc := ix.walk(hashes)
	if sc == nil {
		return dst
	}
	for _, w := range sc.first {
		wk := ix.workers[w]
		dst = append(dst, Overlap{Worker: wk.id, Tag: wk.tag, Blocks: sc.blocks(w)})
	}
	ix.putScratch(sc)
	return dst
}

// TagOverlap is one worker's answer to LookupTags: its tag (SetTag) and
// how many leading blocks of the request it holds.
type TagOverlap struct{ Tag, Blocks int32 }

// LookupTags is Lookup for a caller that numbers its workers with tags: the
// answer carries no worker ids, and workers without a tag are left out.
// It is the same walk; only the answer is smaller (8 bytes, no string
// loads), which is most of a lookup's cost when a shared prefix puts every
// one of a thousand workers in the answer.
func (ix *Index) LookupTags(hashes []uint64, dst []TagOverlap) []TagOverlap {
	if len(hashes) == 0 {
		return dst
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	sc := ix.walk(hashes)
	if sc == nil {
		return dst
	}
	for _, w := range sc.first {
		if t := ix.tags[w]; t >= 0 {
			dst = append(dst, TagOverlap{Tag: t, Blocks: int32(sc.blocks(w))})
		}
	}
	ix.putScratch(sc)
	return dst
}

// TierOverlap is one worker's answer to LookupTiers: its tag (SetTag), how
// many leading blocks of the request it holds in any tier (Blocks, as
// LookupTags answers), and how many of those lead in its pool alone (Pool)
// and in its pool or host memory (Host): the rest of Blocks is onboarded
// from host memory (Host − Pool) and from disk (Blocks − Host).
type TierOverlap struct{ Tag, Blocks, Pool, Host int32 }

// tierState is one worker's run during LookupTiers: the depth at which
// each of its prefixes ended (-1: still going) and the tiers it holds the
// current block in.
type tierState struct {
	slot               uint32
	blocks, pool, host int32
	mask               uint8
}

// LookupTiers is LookupTags with each worker's answer split by tier (the
// per-tier residences of a LowerTiers index: each node knows its tier).
// It walks every residence on the prompt's chains, where Lookup skips
// chains whose set of workers is unchanged, so it costs more per lookup:
// callers use it while some worker has lower tiers.
func (ix *Index) LookupTiers(hashes []uint64, dst []TierOverlap) []TierOverlap {
	if len(hashes) == 0 {
		return dst
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	e0, ok := ix.heads.get(hashes[0])
	if !ok {
		return dst
	}
	sc := ix.getScratch()
	touch := ix.ttlTicks == 0
	var now uint32
	if touch {
		now = ix.tick()
	}
	states := sc.tiers[:0]
	sc.first = sc.first[:0]
	// sc.gen[slot] is the worker's position in states plus one.
	for i := e0.head; i != nilNode; i = ix.nodes.at(i).sibling {
		n := ix.nodes.at(i)
		p := sc.gen[n.worker]
		if p == 0 {
			states = append(states, tierState{slot: n.worker, blocks: -1, pool: -1, host: -1})
			p = int32(len(states))
			sc.gen[n.worker] = p
			sc.first = append(sc.first, n.worker)
		}
		states[p-1].mask |= 1 << *ix.nodes.tierAt(i)
	}
	if touch {
		ix.nodes.at(e0.head).touch(now)
	}
	// live lists the states whose run goes on, compacted at every depth,
	// so a long prompt held by few workers costs those few per block.
	live := sc.live[:0]
	for k := range states {
		live = append(live, int32(k))
	}
	end := int32(len(hashes))
	prev := e0
	for depth := int32(0); ; depth++ {
		// Close the runs that block depth ends (its masks are complete).
		n := 0
		for _, k := range live {
			st := &states[k]
			m := st.mask
			st.mask = 0
			if m == 0 {
				st.blocks = depth
				if st.pool < 0 {
					st.pool = depth
				}
				if st.host < 0 {
					st.host = depth
				}
				continue
			}
			if st.pool < 0 && m&(1<<kvcache.TierG1) == 0 {
				st.pool = depth
			}
			if st.host < 0 && m&(1<<kvcache.TierG1|1<<kvcache.TierG2) == 0 {
				st.host = depth
			}
			live[n] = k
			n++
		}
		live = live[:n]
		if n == 0 || depth+1 >= int32(len(hashes)) {
			break
		}
		// The next chain that is not the same workers in their pools.
		var e hashEntry
		for {
			depth++
			var ok bool
			if e, ok = ix.heads.get(hashes[depth]); !ok {
				end = depth
				break
			}
			if touch {
				ix.nodes.at(e.head).touch(now)
			}
			if e.n != prev.n || e.fp&fpMask != prev.fp&fpMask || e.n == nSaturated || e.fp&fpLower != 0 || depth+1 >= int32(len(hashes)) {
				break
			}
			// Same workers as the chain before, every residence in
			// its pool: every live run goes on in every tier.
		}
		if end == depth {
			break
		}
		prev = e
		for i := e.head; i != nilNode; i = ix.nodes.at(i).sibling {
			n := ix.nodes.at(i)
			if p := sc.gen[n.worker]; p != 0 && states[p-1].blocks < 0 {
				states[p-1].mask |= 1 << *ix.nodes.tierAt(i)
			}
		}
		depth-- // the loop's close step is for this depth
	}
	sc.live = live
	for k := range states {
		st := &states[k]
		if st.blocks < 0 {
			st.blocks = end
		}
		if st.pool < 0 {
			st.pool = st.blocks
		}
		if st.host < 0 {
			st.host = st.blocks
		}
		if t := ix.tags[st.slot]; t >= 0 {
			dst = append(dst, TierOverlap{Tag: t, Blocks: st.blocks, Pool: st.pool, Host: st.host})
		}
	}
	sc.tiers = states
	ix.putScratch(sc)
	return dst
}

// walk finds, for each worker holding the request's first block, how many
// leading blocks it holds; the answer is read with sc.blocks for each
// worker of sc.first, and putScratch must follow. It returns nil when no
// worker holds the first block. Called under the read lock.
func (ix *Index) walk(hashes []uint64) *scratch {
	e0, ok := ix.heads.get(hashes[0])
	if !ok {
		return nil
	}
	sc := ix.getScratch()
	d := sc.gen
	// Event indexes record use for pruning; approximate ones must not, since
	// their entries are routing decisions that age from when they were made.
	touch := ix.ttlTicks == 0
	var now uint32
	if touch {
		now = ix.tick()
	}
	// Walks are numbered from 1; d[w] is the last walk that found w alive.
	// walkDepth[g] is the depth of walk g, so a worker alive at walk g and
	// not at walk g+1 holds exactly walkDepth[g+1] leading blocks: between
	// walks the set did not change.
	walkDepth := append(sc.walkDepth[:0], 0, 0)
	first := sc.first[:0]
	g := int32(1)
	if touch {
		// Only chain heads are stamped: pruning spares a node whose chain
		// head is recent, and stamping every residence of a block every
		// worker holds would be the O(workers) write this walk avoids.
		ix.nodes.at(e0.head).touch(now)
	}
	if e0.n >= bigChain {
		gi, _ := ix.big.get(hashes[0])
		for _, w := range ix.groups[gi] {
			if d[w] == 0 {
				d[w] = g
				first = append(first, w)
			}
		}
	} else {
		for i := e0.head; i != nilNode; {
			n := ix.nodes.at(i)
			if d[n.worker] == 0 {
				d[n.worker] = g
				first = append(first, n.worker)
			}
			i = n.sibling
		}
	}
	alive := len(first)
	prev := e0
	end := len(hashes)
	for depth := 1; depth < len(hashes); depth++ {
		e, ok := ix.heads.get(hashes[depth])
		if !ok {
			end = depth
			break
		}
		if touch {
			ix.nodes.at(e.head).touch(now)
		}
		if e.n == prev.n && e.fp == prev.fp && e.n != nSaturated {
			continue // same workers as the block before
		}
		prev = e
		walkDepth = append(walkDepth, int32(depth))
		next := g + 1
		alive = 0
		if e.n >= bigChain {
			gi, _ := ix.big.get(hashes[depth])
			for _, w := range ix.groups[gi] {
				if d[w] == g {
					d[w] = next
					alive++
				}
			}
		} else {
			for i := e.head; i != nilNode; {
				n := ix.nodes.at(i)
				if d[n.worker] == g {
					d[n.worker] = next
					alive++
				}
				i = n.sibling
			}
		}
		g = next
		if alive == 0 {
			end = depth
			break
		}
	}
	sc.walkDepth, sc.first, sc.g, sc.end = walkDepth, first, g, end
	return sc
}

// blocks is worker w's answer after walk.
func (sc *scratch) blocks(w uint32) int {
	if v := sc.gen[w]; v < sc.g {
		return int(sc.walkDepth[v+1])
	}
	return sc.end
}

// putScratch restores the scratch to zeros (every worker with a run was on
// the first chain) and pools it.
func (ix *Index) putScratch(sc *scratch) {
	for _, w := range sc.first {
		sc.gen[w] = 0
	}
	ix.scratch.Put(sc)
}

type scratch struct {
	gen       []int32 // by worker slot; all zero between lookups
	tiers     []tierState
	live      []int32
	walkDepth []int32
	first     []uint32 // workers on the first chain
	g         int32    // the last walk's number
	end       int      // depth of the last walk
}

// getScratch must be called under the read lock, so the worker count is
// stable while the scratch is in use.
func (ix *Index) getScratch() *scratch {
	sc, _ := ix.scratch.Get().(*scratch)
	if sc == nil {
		sc = &scratch{}
	}
	if n := len(ix.workers); len(sc.gen) < n {
		sc.gen = append(sc.gen, make([]int32, n-len(sc.gen))...)
	}
	return sc
}

// Len is the number of residences (worker, block) held.
func (ix *Index) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.nodes.live
}

// WorkerBlocks is the number of blocks the worker holds: its cached
// footprint as the index sees it.
func (ix *Index) WorkerBlocks(id string) int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if slot, ok := ix.byID[id]; ok {
		return ix.workers[slot].blocks
	}
	return 0
}

// HasWorker reports whether the worker is registered.
func (ix *Index) HasWorker(id string) bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	_, ok := ix.byID[id]
	return ok
}

// Stats is a snapshot of the index's counters.
type Stats struct {
	Blocks, Workers, DistinctHashes int
	Pruned, Expired                 uint64
	ApplyStats                      ApplyStats
}

// Stats returns a snapshot of the counters.
func (ix *Index) Stats() Stats {
	ix.mu.RLock()
	s := Stats{Blocks: ix.nodes.live, Workers: len(ix.byID), DistinctHashes: ix.heads.len()}
	ix.mu.RUnlock()
	s.Pruned, s.Expired = ix.st.pruned.Load(), ix.st.expired.Load()
	s.ApplyStats = ix.st.snapshot()
	return s
}

// --- residences ---

func (ix *Index) insert(w *worker, hash, engine uint64, up, now uint32, tier kvcache.Tier) uint32 {
	i := ix.nodes.alloc()
	n := ix.nodes.at(i)
	*n = node{hash: hash, engine: engine, sibling: nilNode, up: up, worker: w.slot, stamp: now}
	*ix.nodes.tierAt(i) = uint8(tier)
	if ix.nodes.live == 1 {
		ix.oldest = now
	}
	if e, ok := ix.heads.get(hash); ok {
		// After the head, so the head (what lookups mark) stays put.
		hn := ix.nodes.at(e.head)
		n.sibling = hn.sibling
		hn.sibling = i
		if e.n != nSaturated {
			e.n++
		}
		e.fp = (e.fp+w.fp)&fpMask | e.fp&fpLower
		if tier != kvcache.TierG1 {
			e.fp |= fpLower
		}
		ix.heads.put(hash, e)
		switch {
		case e.n == bigChain:
			ix.big.put(hash, ix.newGroup(e.head))
		case e.n > bigChain:
			g, _ := ix.big.get(hash)
			ix.groups[g] = append(ix.groups[g], w.slot)
		}
	} else {
		e := hashEntry{head: i, n: 1, fp: w.fp}
		if tier != kvcache.TierG1 {
			e.fp |= fpLower
		}
		ix.heads.put(hash, e)
	}
	w.blocks++
	return i
}

// removeGroup removes the index blocks of one engine block, last first, and
// returns how many. up links are checked before each step because pruning
// may have freed (and recycled) a middle node.
func (ix *Index) removeGroup(w *worker, last uint32) int {
	removed := 0
	i := last
	eh := ix.nodes.at(i).engine
	for i != nilNode {
		n := ix.nodes.at(i)
		if n.worker != w.slot || n.engine != eh {
			break
		}
		up := n.up
		ix.removeNode(i)
		removed++
		i = up
	}
	return removed
}

func (ix *Index) removeNode(i uint32) {
	n := ix.nodes.at(i)
	h := n.hash
	w := ix.workers[n.worker]
	e, _ := ix.heads.get(h)
	if e.n >= bigChain {
		ix.dropFromGroup(h, w.slot, e.n == bigChain)
	}
	if e.head == i {
		if n.sibling == nilNode {
			ix.heads.del(h)
			e = hashEntry{}
		} else {
			e.head = n.sibling
		}
	} else {
		for p := e.head; p != nilNode; {
			pn := ix.nodes.at(p)
			if pn.sibling == i {
				pn.sibling = n.sibling
				break
			}
			p = pn.sibling
		}
	}
	if e.n != 0 {
		e.fp = (e.fp-w.fp)&fpMask | e.fp&fpLower
		if e.fp&fpLower != 0 && *ix.nodes.tierAt(i) != uint8(kvcache.TierG1) && !ix.chainHasLower(e.head) {
			// i is off the chain already: the flag goes with the
			// chain's last residence below the pool.
			e.fp &^= fpLower
		}
		if e.n == nSaturated {
			e.n = ix.chainLen(e.head)
		} else {
			e.n--
		}
		ix.heads.put(h, e)
	}
	w.blocks--
	ix.nodes.release(i)
}

// chainHasLower reports whether a residence of the chain from head is
// below the pool.
func (ix *Index) chainHasLower(head uint32) bool {
	for i := head; i != nilNode; i = ix.nodes.at(i).sibling {
		if *ix.nodes.tierAt(i) != uint8(kvcache.TierG1) {
			return true
		}
	}
	return false
}

func (ix *Index) newGroup(head uint32) uint32 {
	var g uint32
	if n := len(ix.freeGroups); n > 0 {
		g, ix.freeGroups = ix.freeGroups[n-1], ix.freeGroups[:n-1]
	} else {
		g = uint32(len(ix.groups))
		ix.groups = append(ix.groups, nil)
	}
	ws := make([]uint32, 0, 2*bigChain)
	for i := head; i != nilNode; i = ix.nodes.at(i).sibling {
		ws = append(ws, ix.nodes.at(i).worker)
	}
	ix.groups[g] = ws
	return g
}

// dropFromGroup removes one residence of slot from hash's worker array,
// and the array itself when the hash falls below bigChain.
func (ix *Index) dropFromGroup(hash uint64, slot uint32, last bool) {
	g, ok := ix.big.get(hash)
	if !ok {
		return
	}
	if last {
		ix.groups[g] = nil
		ix.freeGroups = append(ix.freeGroups, g)
		ix.big.del(hash)
		return
	}
	ws := ix.groups[g]
	for j, v := range ws {
		if v == slot {
			ws[j] = ws[len(ws)-1]
			ix.groups[g] = ws[:len(ws)-1]
			return
		}
	}
}

func (ix *Index) chainLen(head uint32) uint16 {
	c := 0
	for i := head; i != nilNode && c < int(nSaturated); i = ix.nodes.at(i).sibling {
		c++
	}
	return uint16(c)
}

// evict removes a node chosen by pruning or expiry, which know only the node.
func (ix *Index) evict(i uint32) {
	n := ix.nodes.at(i)
	w := ix.workers[n.worker]
	if last, ok := w.engine.get(n.engine); ok && last == i {
		w.engine.del(n.engine)
	}
	ix.removeNode(i)
}

func (ix *Index) refresh(i, now uint32) { ix.nodes.at(i).stamp = now }

// Pruning ranks nodes by age in logarithmic buckets, four per octave
// (ages within 25% of each other rank equal): exact LRU order is not worth a
// list relinked on every event, and the slab sweeps are sequential.
const ageBuckets = 4 * 33

func ageBucket(a uint32) int {
	if a < 4 {
		return int(a)
	}
	l := bits.Len32(a) // 3..32
	return 4*(l-2) + int(a>>(l-3)&3)
}

// pruneLocked brings an over-full index down to its target, oldest stamps
// first. A pass histograms the ages; later passes evict from the oldest
// bucket down. In event indexes a node whose chain head was used recently is
// spared: lookups that skip a chain (same workers as the block before) stamp
// only its head, and a system prompt every worker holds must not lose all
// but one of its residences.
func (ix *Index) pruneLocked() {
	if ix.nodes.live <= ix.max {
		return
	}
	now := ix.tick()
	var hist [ageBuckets]int
	for i := range ix.nodes.used {
		if nd := ix.nodes.at(uint32(i)); nd.worker != freeWorker {
			hist[ageBucket(age(nd.stamp, now))]++
		}
	}
	// thr is the youngest bucket that must go at least in part; every
	// older bucket goes entirely, which cannot overshoot the target.
	need, cum, thr := ix.nodes.live-ix.target, 0, ageBuckets-1
	for ; thr > 0; thr-- {
		if cum += hist[thr]; cum >= need {
			break
		}
	}
	pruned := ix.evictOlder(thr, true, now)
	for b := thr; b >= 0 && ix.nodes.live > ix.target; b-- {
		// Sparing may leave too many; continue with younger buckets.
		pruned += ix.evictOlder(b, false, now)
	}
	ix.st.pruned.Add(uint64(pruned))
}

// evictOlder evicts nodes whose age bucket is above b (strict) or equal to b
// (!strict), until the index is at its target.
func (ix *Index) evictOlder(b int, strict bool, now uint32) int {
	n := 0
	for i := range ix.nodes.used {
		if ix.nodes.live <= ix.target {
			break
		}
		nd := ix.nodes.at(uint32(i))
		if nd.worker == freeWorker {
			continue
		}
		ab := ageBucket(age(nd.stamp, now))
		if (strict && ab <= b) || (!strict && ab != b) || ix.headIsYounger(uint32(i), nd, ab, now) {
			continue
		}
		ix.evict(uint32(i))
		n++
	}
	return n
}

func (ix *Index) headIsYounger(i uint32, n *node, bucket int, now uint32) bool {
	if ix.ttlTicks != 0 {
		return false
	}
	e, _ := ix.heads.get(n.hash)
	return e.head != i && ageBucket(age(ix.nodes.at(e.head).stamp, now)) < bucket
}
