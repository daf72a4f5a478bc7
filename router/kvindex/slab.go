package kvindex

import "sync/atomic"

// nilNode terminates every intrusive list of node indexes.
const nilNode = ^uint32(0)

// freeWorker marks a node on the free list.
const freeWorker = ^uint32(0)

// node is one residence: one worker holding one Tandem block. It is 32 bytes
// and lives in a slab addressed by uint32, not behind a pointer, so a
// million residences cost one allocation per chunk and nothing for the
// garbage collector to trace. There is no LRU list: pruning sweeps the slab
// by age, so storing, removing and looking up never relink neighbours.
type node struct {
	hash   uint64 // Tandem sequence hash
	engine uint64 // engine block hash: the key of the worker's engine map
	// sibling links the residences of the same hash (other workers, or the
	// same worker under another engine hash); on the free list, the next
	// free node.
	sibling uint32
	// up is the previous Tandem block of the same engine block when an engine
	// block spans several Tandem blocks; BlockRemoved walks it.
	up     uint32
	worker uint32
	// stamp is the last use in ms ticks: placement, a refresh, or a lookup
	// that matched it (stored atomically under the read lock, which is what
	// lets lookups record use without the write lock). Pruning evicts the
	// oldest stamps; expiry compares them with the TTL.
	stamp uint32
}

func (n *node) touch(now uint32) {
	if atomic.LoadUint32(&n.stamp) != now {
		atomic.StoreUint32(&n.stamp, now)
	}
}

// Chunks are fixed-size so growth never copies nodes and never leaves a
// half-empty doubled array behind; an index sized for millions of blocks
// overshoots by at most one chunk.
const (
	chunkBits = 12
	chunkLen  = 1 << chunkBits
	chunkMask = chunkLen - 1
)

type slab struct {
	chunks [][]node
	// tiers holds each node's tier (kvcache.Tier), one byte per node in
	// chunks beside the nodes': a residence's tier costs a byte, not a
	// second index.
	tiers [][]uint8
	free  uint32 // head of the free list
	used  int    // nodes ever handed out (high-water mark)
	live  int
}

func newSlab() slab { return slab{free: nilNode} }

func (s *slab) at(i uint32) *node { return &s.chunks[i>>chunkBits][i&chunkMask] }

// tierAt is node i's tier byte.
func (s *slab) tierAt(i uint32) *uint8 { return &s.tiers[i>>chunkBits][i&chunkMask] }

func (s *slab) alloc() uint32 {
	s.live++
	if s.free != nilNode {
		i := s.free
		s.free = s.at(i).sibling
		return i
	}
	i := uint32(s.used)
	if s.used&chunkMask == 0 {
		s.chunks = append(s.chunks, make([]node, chunkLen))
		s.tiers = append(s.tiers, make([]uint8, chunkLen))
	}
	s.used++
	return i
}

func (s *slab) release(i uint32) {
	n := s.at(i)
	*n = node{worker: freeWorker, sibling: s.free}
	*s.tierAt(i) = 0
	s.free = i
	s.live--
}

// bytes is the slab's footprint, for the memory metric.
func (s *slab) bytes() int { return len(s.chunks) * chunkLen * (32 + 1) }
