package kvindex

// table is an open-addressing hash table from uint64 to V: linear probing,
// backward-shift deletion, key and value side by side. The index's two
// hot maps (hash → chain, engine hash → node) churn constantly (every
// stored block is later removed), and Go's map, whose deletions leave
// tombstones to be cleaned by rehashing, was slower under that churn at a
// million keys (docs/benchmarks/router.md). Here a
// lookup is one cache miss and a deletion leaves nothing behind.
//
// Key 0 marks an empty slot, so the zero key lives beside the array.
type table[V any] struct {
	slots   []slot[V]
	mask    uint64
	n       int
	hasZero bool
	zero    V
}

type slot[V any] struct {
	k uint64
	v V
}

const minTableSlots = 16

// mix spreads keys over slots: engine hashes may be small integers.
func mix(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	return k
}

func (t *table[V]) len() int { return t.n }

func (t *table[V]) get(k uint64) (V, bool) {
	if k == 0 {
		return t.zero, t.hasZero
	}
	if t.slots == nil {
		var z V
		return z, false
	}
	for i := mix(k) & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.k == k {
			return s.v, true
		}
		if s.k == 0 {
			var z V
			return z, false
		}
	}
}

// peek loads k's home slot and returns its key, for warming the cache: a
// loop of peeks issues independent loads that the CPU overlaps.
func (t *table[V]) peek(k uint64) uint64 {
	if t.slots == nil {
		return 0
	}
	return t.slots[mix(k)&t.mask].k
}

func (t *table[V]) put(k uint64, v V) {
	if k == 0 {
		if !t.hasZero {
			t.n++
		}
		t.hasZero, t.zero = true, v
		return
	}
	// Grow past a 3/4 load. Linear probing's miss cost is about
	// (1 + 1/(1-load)²)/2 probes: 8.5 at 3/4 (two cache lines), but 32 at 7/8.
	if t.slots == nil || (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	for i := mix(k) & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.k == k {
			s.v = v
			return
		}
		if s.k == 0 {
			s.k, s.v = k, v
			t.n++
			return
		}
	}
}

func (t *table[V]) del(k uint64) {
	if k == 0 {
		if t.hasZero {
			var z V
			t.hasZero, t.zero = false, z
			t.n--
		}
		return
	}
	if t.slots == nil {
		return
	}
	i := mix(k) & t.mask
	for t.slots[i].k != k {
		if t.slots[i].k == 0 {
			return
		}
		i = (i + 1) & t.mask
	}
	t.n--
	// Shift later members of the probe run back into the hole, so lookups
	// never need tombstones.
	for j := i; ; {
		j = (j + 1) & t.mask
		sj := &t.slots[j]
		if sj.k == 0 {
			break
		}
		home := mix(sj.k) & t.mask
		// sj may move to i only if its home is not cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.slots[i] = *sj
			i = j
		}
	}
	var z slot[V]
	t.slots[i] = z
}

func (t *table[V]) grow() {
	old := t.slots
	size := max(minTableSlots, 2*len(old))
	t.slots = make([]slot[V], size)
	t.mask = uint64(size - 1)
	for _, s := range old {
		if s.k == 0 {
			continue
		}
		i := mix(s.k) & t.mask
		for t.slots[i].k != 0 {
			i = (i + 1) & t.mask
		}
		t.slots[i] = s
	}
}

// each calls f for every entry. f must not modify the table.
func (t *table[V]) each(f func(k uint64, v V)) {
	if t.hasZero {
		f(0, t.zero)
	}
	for _, s := range t.slots {
		if s.k != 0 {
			f(s.k, s.v)
		}
	}
}
