package router

import "sync"

// activeTracker is Dynamo's ActiveSequences (ai-dynamo/dynamo,
// lib/kv-router: sequence.rs), kept by the
// router from its own decisions: per worker, the unique blocks of requests
// in flight (decode load), the uncached prompt tokens of those not past
// their first token (prefill load), and which blocks are pinned: held by a
// request whose prefill is done, so certainly in the engine's cache while it
// runs.
//
// Blocks are indexed by hash, each with the workers holding it, so scoring a
// request costs its blocks plus their in-flight residences, never a pass
// over every worker's set: with a thousand workers that difference is the
// router's latency budget.
type activeTracker struct {
	mu     sync.Mutex
	blocks map[uint64]*activeEntry
	load   []activeLoad // by worker slot
	// requests is the sum of every worker's requests in flight.
	requests int
}

// activeEntry is one block in flight. fp and pfp fingerprint the set of
// workers holding it and the subset holding it pinned, so that score can
// treat a run of blocks with the same sets (a shared system prompt in
// flight on every worker) as one step instead of one per block.
type activeEntry struct {
	refs    []activeRef
	fp, pfp uint64
}

func slotFP(s int32) uint64 { return (uint64(s) + 1) * 0x9E3779B97F4A7C15 }

type activeRef struct {
	slot   int32
	n      int32 // in-flight requests of the worker containing the block
	pinned int32 // of which past their first token
}

type activeLoad struct {
	// owner tells a reused slot's new worker from its previous one.
	owner         *kvWorker
	unique        int // distinct blocks in flight
	requests      int
	prefillTokens int // uncached prompt tokens of requests before their first token
	prefilling    int // requests before their first token
	// busyUntil (unix ns) is the router's virtual prefill queue: when the
	// prefills it placed on the worker should all be done. Each routed
	// request extends it by its predicted work; each first token corrects
	// it by that request's error (an engine that batches several prefills
	// into one step finishes them sooner than one after another), and it
	// drains when no request is left before its first token.
	busyUntil int64
}

func newActiveTracker() *activeTracker {
	return &activeTracker{blocks: map[uint64]*activeEntry{}}
}

// loadFor returns the worker's load. Callers hold the KV's read lock and
// have checked the worker is still registered; removal drops a worker's
// load under the write lock before its slot can be reused, so a slot with
// another owner is simply claimed.
func (a *activeTracker) loadFor(w *kvWorker) *activeLoad {
	for len(a.load) <= w.slot {
		a.load = append(a.load, activeLoad{})
	}
	l := &a.load[w.slot]
	if l.owner != w {
		*l = activeLoad{owner: w}
	}
	return l
}

// reserve records a request the policy just chose the worker for, and its
// place in the worker's virtual prefill queue (f's prediction fields). It
// runs inside the decision, so concurrent decisions see each other's load;
// the blocks follow with addBlocks once the router confirms the route.
func (a *activeTracker) reserve(w *kvWorker, f *flight, bs int, now int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.loadFor(w)
	decodes := l.requests - l.prefilling
	f.decoding = decodes > 0
	f.predStart = queueStart(l.busyUntil, l.prefilling, now)
	f.work, _ = w.timing.estimate(max(f.prefillTokens, 1), decodes, l.unique*bs+f.isl, f.predStart == now)
	f.predFinish = f.predStart + int64(f.work*1e9)
	l.busyUntil = f.predFinish
	l.requests++
	a.requests++
	l.prefilling++
	l.prefillTokens += f.prefillTokens
}

// addBlocks records the blocks of a reserved request.
func (a *activeTracker) addBlocks(w *kvWorker, hashes []uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.loadFor(w)
	slot := int32(w.slot)
	for _, h := range hashes {
		e := a.blocks[h]
		if e == nil {
			e = &activeEntry{}
			a.blocks[h] = e
		}
		i := refIndex(e.refs, slot)
		if i < 0 {
			e.refs = append(e.refs, activeRef{slot: slot, n: 1})
			e.fp += slotFP(slot)
			l.unique++
			continue
		}
		e.refs[i].n++
	}
}

func refIndex(refs []activeRef, slot int32) int {
	for i := range refs {
		if refs[i].slot == slot {
			return i
		}
	}
	return -1
}

// prefillDone records a request's first token: its prompt is computed and
// its blocks are pinned in the engine's cache until it finishes.
func (a *activeTracker) prefillDone(w *kvWorker, hashes []uint64, prefillTokens int, predFinish, now int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.loadFor(w)
	l.prefillTokens -= prefillTokens
	l.prefilling--
	if l.prefilling <= 0 {
		l.prefilling, l.busyUntil = 0, now
	} else {
		// Whatever this prefill took more or less than predicted, the
		// ones queued behind it start that much later or sooner.
		l.busyUntil = max(l.busyUntil+now-predFinish, now)
	}
	slot := int32(w.slot)
	for _, h := range hashes {
		e := a.blocks[h]
		if e == nil {
			continue
		}
		if i := refIndex(e.refs, slot); i >= 0 {
			if e.refs[i].pinned == 0 {
				e.pfp += slotFP(slot)
			}
			e.refs[i].pinned++
		}
	}
}

// free records a finished request.
func (a *activeTracker) free(w *kvWorker, hashes []uint64, prefillDone bool, prefillTokens int, work float64, now int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.loadFor(w)
	l.requests--
	a.requests--
	if !prefillDone {
		// Cancelled (or failed) before its first token: its prefill
		// leaves the queue.
		l.prefillTokens -= prefillTokens
		l.prefilling--
		if l.prefilling <= 0 {
			l.prefilling, l.busyUntil = 0, now
		} else {
			l.busyUntil = max(l.busyUntil-int64(work*1e9), now)
		}
	}
	slot := int32(w.slot)
	for _, h := range hashes {
		e := a.blocks[h]
		if e == nil {
			continue
		}
		i := refIndex(e.refs, slot)
		if i < 0 {
			continue
		}
		r := &e.refs[i]
		r.n--
		if prefillDone {
			if r.pinned--; r.pinned == 0 {
				e.pfp -= slotFP(slot)
			}
		}
		if r.n > 0 {
			continue
		}
		l.unique--
		e.fp -= slotFP(slot)
		if r.pinned > 0 { // cannot happen with balanced calls; keep fp exact anyway
			e.pfp -= slotFP(slot)
		}
		e.removeAt(i)
		if len(e.refs) == 0 {
			delete(a.blocks, h)
		}
	}
}

func (e *activeEntry) removeAt(i int) {
	e.refs[i] = e.refs[len(e.refs)-1]
	e.refs = e.refs[:len(e.refs)-1]
}

// dropWorker forgets a departed worker's in-flight blocks and frees its
// slot for reuse.
func (a *activeTracker) dropWorker(slot int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if slot >= len(a.load) || a.load[slot].owner == nil {
		return
	}
	s := int32(slot)
	for h, e := range a.blocks {
		if i := refIndex(e.refs, s); i >= 0 {
			e.fp -= slotFP(s)
			if e.refs[i].pinned > 0 {
				e.pfp -= slotFP(s)
			}
			e.removeAt(i)
			if len(e.refs) == 0 {
				delete(a.blocks, h)
			}
		}
	}
	a.requests -= a.load[slot].requests
	a.load[slot] = activeLoad{}
}

// score fills, for the request's block hashes, each worker's count of
// blocks already in flight there (sc.activeMatch) and its leading run of
// pinned blocks (sc.pinnedLead), and copies the candidates' loads.
//
// Consecutive blocks held by the same workers (same fingerprints) form a
// run that is credited once, at its end: the cost is the request's blocks
// plus the residences of one block per run.
func (a *activeTracker) score(hashes []uint64, sc *pickScratch) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var run *activeEntry
	runStart := 0
	sc.runs = sc.runs[:0]
	sc.inFlight = a.requests
	flush := func(end int) {
		if run == nil {
			return
		}
		n := int32(end - runStart)
		reqs := 0
		for _, r := range run.refs {
			reqs += int(r.n)
		}
		sc.runs = append(sc.runs, activeRun{start: int32(runStart), end: int32(end), requests: int32(reqs)})
		for _, r := range run.refs {
			s := r.slot
			if int(s) >= len(sc.activeMatch) {
				continue
			}
			sc.touch(s)
			sc.activeMatch[s] += n
			if r.pinned > 0 && int(sc.pinnedLead[s]) == runStart {
				sc.pinnedLead[s] += n
			}
		}
	}
	end := len(hashes)
	for i, h := range hashes {
		e := a.blocks[h]
		if e == nil {
			// Hashes are chained: a block is in flight only as part of a
			// request that holds every block before it, so nothing deeper
			// is either (a 4,096-token prompt behind a shared system prompt
			// is 224 map probes fewer).
			end = i
			break
		}
		if run != nil && e.fp == run.fp && e.pfp == run.pfp && len(e.refs) == len(run.refs) {
			continue
		}
		flush(i)
		run, runStart = e, i
	}
	flush(end)
	for i := range sc.cands {
		c := &sc.cands[i]
		if c.w.slot < len(a.load) && a.load[c.w.slot].owner == c.w {
			l := a.load[c.w.slot]
			c.activeUnique, c.activeRequests, c.activePrefill = l.unique, l.requests, l.prefillTokens
			c.prefilling, c.busyUntil = l.prefilling, l.busyUntil
		}
	}
}

// activeRun is a run of a request's blocks in flight on the same workers,
// with the number of in-flight requests that contain them.
type activeRun struct{ start, end, requests int32 }

// inFlightSharing is how many requests in flight contain the request's
// first depth blocks (after score).
func (sc *pickScratch) inFlightSharing(depth int) int {
	for _, r := range sc.runs {
		if int(r.start) < depth && depth <= int(r.end) {
			return int(r.requests)
		}
	}
	return 0
}

// totals returns the whole tracker's counts, for tests.
func (a *activeTracker) totals() (blocks, requests, prefill int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, l := range a.load {
		if l.owner != nil {
			requests += l.requests
			prefill += l.prefillTokens
		}
	}
	return len(a.blocks), requests, prefill
}
