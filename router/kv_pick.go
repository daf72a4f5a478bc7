package router

import (
	"math"
	"time"

	"github.com/tandemllm/tandem/blockhash"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/router/kvindex"
)

// flight is one routed request, from Routed to Finished.
type flight struct {
	w             *kvWorker
	hashes        []uint64
	isl           int
	prefillTokens int // isl minus the predicted cached tokens
	predicted     int // blocks
	// held is the prefix, in blocks, the router believed the worker held
	// when it routed: predicted before the last-token cap.
	held      int
	routedAt  time.Time
	firstDone bool
	// lateTTFT is the TTFT of a first token whose cached_tokens the
	// engine reports only later (CachedTokensLate); 0 otherwise.
	lateTTFT time.Duration
	// The TTFT prediction made at routing: when the prefill was expected
	// to start and end (unix ns), the work it added to the worker's queue
	// (seconds) and whether the worker was decoding other requests.
	predStart, predFinish int64
	work                  float64
	decoding              bool
}

// candScore is one candidate during a Pick.
type candScore struct {
	idx int // into the candidates
	w   *kvWorker
	st  workerHealth
	// overlap is the prefix, in blocks, the worker is predicted to hold.
	overlap int
	// lower is how many of overlap's blocks the worker holds only below
	// its pool (host memory, disk): a copy, priced by the ttft cost.
	lower int
	// lowerDisk is how many of lower's blocks are on disk only (the
	// worker's own or a shared one): read at the disk's bandwidth.
	lowerDisk      int
	activeUnique   int
	activeRequests int
	activePrefill  int
	prefilling     int   // requests before their first token
	busyUntil      int64 // unix ns: when the router's virtual prefill queue drains
	logit          float64
}

// pickScratch is the per-decision memory, pooled so a decision allocates
// nothing in steady state. Arrays indexed by worker slot are all zero
// between decisions; touched lists the slots to reset.
type pickScratch struct {
	hasher      blockhash.Hasher
	hashes      []uint64
	ov          []kvindex.TagOverlap
	tov         []kvindex.TierOverlap
	evOv, apOv  []int32
	poolOv      []int32
	hostOv      []int32
	activeMatch []int32
	pinnedLead  []int32
	touched     []int32
	cands       []candScore
	ties        []int
	ws          []*kvWorker
	runs        []activeRun // the request's in-flight runs (activeTracker.score)
	inFlight    int         // requests in flight on every worker
}

func (k *KV) scratch(slots int) *pickScratch {
	sc, _ := k.pool.Get().(*pickScratch)
	if sc == nil {
		sc = &pickScratch{}
	}
	grow := func(a []int32) []int32 {
		if len(a) < slots {
			a = append(a, make([]int32, slots-len(a))...)
		}
		return a
	}
	sc.evOv, sc.apOv, sc.poolOv, sc.hostOv = grow(sc.evOv), grow(sc.apOv), grow(sc.poolOv), grow(sc.hostOv)
	sc.activeMatch, sc.pinnedLead = grow(sc.activeMatch), grow(sc.pinnedLead)
	return sc
}

func (k *KV) release(sc *pickScratch) {
	for _, s := range sc.touched {
		sc.evOv[s], sc.apOv[s], sc.activeMatch[s], sc.pinnedLead[s], sc.poolOv[s], sc.hostOv[s] = 0, 0, 0, 0, 0, 0
	}
	sc.touched = sc.touched[:0]
	clear(sc.ws)
	sc.ws = sc.ws[:0]
	k.pool.Put(sc)
}

// touch records that slot's scratch entries may be non-zero.
func (sc *pickScratch) touch(s int32) {
	if sc.evOv[s] == 0 && sc.apOv[s] == 0 && sc.activeMatch[s] == 0 && sc.pinnedLead[s] == 0 {
		sc.touched = append(sc.touched, s)
	}
}

// resolve maps candidates to workers, creating the unknown ones. The
// router passes the same candidate list, in the same order, request after
// request, so the last resolution is kept and revalidated by comparing ids
// (cheap: equal strings usually share their pointer) instead of a map
// lookup per worker.
func (k *KV) resolve(cands []Candidate, sc *pickScratch) {
	k.mu.RLock()
	if len(k.lastIDs) == len(cands) {
		same := true
		for i := range cands {
			if cands[i].ID != k.lastIDs[i] {
				same = false
				break
			}
		}
		if same {
			sc.ws = append(sc.ws, k.lastWs...)
			k.mu.RUnlock()
			return
		}
	}
	missing := false
	for _, c := range cands {
		w := k.workers[c.ID]
		missing = missing || w == nil
		sc.ws = append(sc.ws, w)
	}
	gen := k.gen
	k.mu.RUnlock()
	if missing {
		return // created below; the next decision caches
	}
	k.mu.Lock()
	if k.gen == gen { // no worker came or went meanwhile
		k.lastIDs = k.lastIDs[:0]
		for _, c := range cands {
			k.lastIDs = append(k.lastIDs, c.ID)
		}
		k.lastWs = append(k.lastWs[:0], sc.ws...)
	}
	k.mu.Unlock()
}

// Pick implements Policy. It hashes the prompt's full blocks, looks them up
// in the index(es), adds the in-flight load the router itself placed, and
// minimizes the cost (or samples from its softmax).
func (k *KV) Pick(req *Request, cands []Candidate) (Decision, error) {
	start := time.Now()
	k.mu.RLock()
	slots := len(k.slots)
	k.mu.RUnlock()
	// Room for the workers resolve may create; a worker added concurrently
	// beyond it is skipped by the by-slot writes (it has no history yet).
	sc := k.scratch(slots + len(cands))
	defer k.release(sc)
	k.resolve(cands, sc)
	for i, c := range cands {
		if sc.ws[i] == nil {
			sc.ws[i] = k.workerFor(c.ID)
		}
	}
	bs := k.cfg.BlockSize
	sc.hashes = sc.hasher.Append(sc.hashes[:0], 0, false, req.Tokens, bs)
	hashes := sc.hashes

	now := k.cfg.Now()
	k.maybeExpire(now)
	if k.cfg.OverlapWeight > 0 && len(hashes) > 0 {
		if k.events != nil {
			if k.anyTiered.Load() {
				// One walk answers every tier's run: what a worker holds
				// in its pool, in its pool or host memory, and anywhere.
				sc.tov = k.events.LookupTiers(hashes, sc.tov[:0])
				for _, o := range sc.tov {
					if s := o.Tag; s >= 0 && int(s) < len(sc.evOv) {
						sc.touch(s)
						sc.evOv[s], sc.poolOv[s], sc.hostOv[s] = o.Blocks, o.Pool, o.Host
					}
				}
			} else {
				sc.ov = k.events.LookupTags(hashes, sc.ov[:0])
				sc.fill(sc.ov, sc.evOv)
			}
		}
		sc.ov = k.approx.LookupTags(hashes, sc.ov[:0])
		sc.fill(sc.ov, sc.apOv)
	}
	sc.cands = sc.cands[:0]
	nowNs := now.UnixNano()
	for i := range cands {
		w := sc.ws[i]
		st := w.healthAt(nowNs)
		if st == healthMissing && k.cfg.OnMissing == MissingFail {
			continue
		}
		sc.cands = append(sc.cands, candScore{idx: i, w: w, st: st})
	}
	if len(sc.cands) == 0 {
		return Decision{}, ErrKVEventsMissing
	}
	// From reading the load to placing this request's share of it, one
	// decision at a time: concurrent decisions that all read the same
	// idle worker all pick it (a burst of arrivals lands on one worker).
	k.decideMu.Lock()
	now = k.cfg.Now() // after any wait for the lock
	nowNs = now.UnixNano()
	k.active.score(hashes, sc)
	k.addExternal(sc, nowNs)

	isl := len(req.Tokens)
	for i := range sc.cands {
		c := &sc.cands[i]
		s := int32(c.w.slot)
		ev, ap := int(sc.evOv[s]), int(sc.apOv[s])
		switch {
		case c.st == healthApprox:
			c.overlap = ap
		case c.st == healthHealthy:
			c.overlap = ev
			if c.w.tiered.Load() {
				c.lower = max(ev-int(sc.poolOv[s]), 0)
				c.lowerDisk = min(max(ev-int(sc.hostOv[s]), 0), c.lower)
			}
		default:
			c.overlap = max(ev, ap)
		}
	}
	cost := k.cost
	if k.drifting.Load() > 0 && cost.model() == CostTTFT {
		for i := range sc.cands {
			if sc.cands[i].w.ttftAcc.Drifting() {
				// A TTFT that keeps missing cannot be compared with the
				// others: the whole decision uses the weighted cost.
				cost = fallbackCost
				break
			}
		}
	}
	cost.score(k, sc, isl, nowNs)
	best := k.choose(sc, cost)
	c := sc.cands[best]
	predicted := min(c.overlap, max(isl-1, 0)/bs) // an engine recomputes the last prompt token
	k.reserve(req, c.w, predicted*bs, c.overlap, now)
	k.decideMu.Unlock()
	k.met.observePick(c.st, time.Since(start))
	d := Decision{WorkerID: cands[c.idx].ID, PredictedCachedTokens: predicted * bs,
		Cost: c.logit, RunnerUpCost: math.NaN(), Ties: 1, CostModel: string(cost.model()), Reason: "cheapest"}
	for i := range sc.cands {
		if i != best && !(sc.cands[i].logit >= d.RunnerUpCost) {
			d.RunnerUpCost = sc.cands[i].logit
		}
	}
	if k.cfg.Temperature > 0 && len(sc.cands) > 1 {
		d.Reason = "softmax_sample"
	} else if len(sc.ties) > 1 {
		d.Ties, d.Reason = len(sc.ties), "tie_broken"
	}
	return d, nil
}

// reserve places the chosen request's load on w before Pick returns, as
// Dynamo's scheduler does when it selects a worker: decisions made
// concurrently must not all see the same idle worker. Routed confirms it
// (and adds the blocks); a route the router abandons ends with Finished.
func (k *KV) reserve(req *Request, w *kvWorker, predictedTokens, heldBlocks int, now time.Time) *flight {
	isl := req.Len()
	f := &flight{w: w, isl: isl, predicted: predictedTokens / k.cfg.BlockSize, held: heldBlocks,
		prefillTokens: max(isl-predictedTokens, 0), routedAt: now}
	k.typical.observe(f.prefillTokens)
	k.mu.Lock()
	old := k.flights[req]
	k.flights[req] = f
	k.mu.Unlock()
	nowNs := now.UnixNano()
	k.mu.RLock()
	if old != nil && k.slots[old.w.slot] == old.w {
		// Re-routed (a retry) before the first route finished: that one
		// is over as far as load goes.
		k.active.free(old.w, old.hashes, old.firstDone, old.prefillTokens, old.work, nowNs)
	}
	if k.slots[w.slot] == w {
		k.active.reserve(w, f, k.cfg.BlockSize, nowNs)
	}
	k.mu.RUnlock()
	return f
}

// fill copies a lookup's answer into a by-slot array. The indexes tag
// each worker with its slot (AddWorker, newWorkerLocked), and a slot is
// reused only after both indexes have dropped its previous worker
// (RemoveWorker), so a tag names the worker in that slot, or a departed one
// no candidate maps to: no worker lookup, no id comparison.
func (sc *pickScratch) fill(ov []kvindex.TagOverlap, dst []int32) {
	for _, o := range ov {
		if s := o.Tag; s >= 0 && int(s) < len(dst) {
			sc.touch(s)
			dst[s] = o.Blocks
		}
	}
}

// maybeExpire drops expired approximate records, at most every TTL/16.
func (k *KV) maybeExpire(now time.Time) {
	k.mu.RLock()
	due := now.Sub(k.lastSweep) >= k.cfg.ApproxTTL/16
	k.mu.RUnlock()
	if !due {
		return
	}
	k.mu.Lock()
	k.lastSweep = now
	k.mu.Unlock()
	k.approx.Expire()
}

// fallbackCost prices decisions the TTFT cost cannot (a drifting worker).
var fallbackCost cost = weightedCost{tandem: true}

// choose returns the index in sc.cands of the chosen candidate.
func (k *KV) choose(sc *pickScratch, c cost) int {
	cs := sc.cands
	if k.cfg.Temperature > 0 && len(cs) > 1 {
		return k.softmax(cs)
	}
	minL := math.Inf(1)
	for i := range cs {
		minL = min(minL, cs[i].logit)
	}
	band := c.band(minL)
	ties := sc.ties[:0]
	for i := range cs {
		if cs[i].logit-minL <= band {
			ties = append(ties, i)
		}
	}
	sc.ties = ties
	if len(ties) == 1 {
		return ties[0]
	}
	return c.breakTie(k, sc, ties)
}

// keepMin filters idx to the entries minimizing f. f is read once per entry:
// footprints move under concurrent KV events, and reading one twice could
// leave no entry equal to the minimum seen first (an empty tie set).
func keepMin(idx []int, f func(int) float64) []int {
	var small [32]float64
	vals := small[:0]
	if len(idx) > len(small) {
		vals = make([]float64, 0, len(idx))
	}
	best := math.Inf(1)
	for _, i := range idx {
		v := f(i)
		vals = append(vals, v)
		best = min(best, v)
	}
	out := idx[:0]
	for j, i := range idx {
		if vals[j] == best {
			out = append(out, i)
		}
	}
	return out
}

// footprint is the worker's cached blocks (Dynamo's tree size) as the
// sources of its overlap see them: a worker routed by approximation must
// not look empty, or every new prefix would pile onto it.
func (k *KV) footprint(c *candScore) int {
	switch {
	case k.events == nil:
		return k.approx.WorkerBlocks(c.w.id)
	case c.st == healthHealthy:
		return k.events.WorkerBlocks(c.w.id)
	}
	return max(k.events.WorkerBlocks(c.w.id), k.approx.WorkerBlocks(c.w.id))
}

// softmax samples like Dynamo's softmax_sample: lower cost is likelier,
// p_i ∝ exp(−(v_i − min)/((max − min)·T)), uniform when all are equal.
func (k *KV) softmax(cs []candScore) int {
	minL, maxL := math.Inf(1), math.Inf(-1)
	for i := range cs {
		minL, maxL = min(minL, cs[i].logit), max(maxL, cs[i].logit)
	}
	k.rngMu.Lock()
	u := k.rng.Float64()
	k.rngMu.Unlock()
	if maxL == minL {
		return int(u * float64(len(cs)))
	}
	scale := 1 / ((maxL - minL) * k.cfg.Temperature)
	total := 0.0
	for i := range cs {
		total += math.Exp(-(cs[i].logit - minL) * scale)
	}
	u *= total
	for i := range cs {
		if u -= math.Exp(-(cs[i].logit - minL) * scale); u <= 0 {
			return i
		}
	}
	return len(cs) - 1
}

// Routed implements Observer: the decision becomes in-flight load and an
// approximate record. A decision this policy's Pick made is already
// reserved; any other (a caller routing by hand) is reserved here.
func (k *KV) Routed(req *Request, d Decision) {
	w := k.workerFor(d.WorkerID)
	var hashes []uint64
	if rp := req.Remote; rp != nil {
		// A routed-load message from another replica carries hashes, never
		// tokens; they count only under the same block size.
		if rp.BlockSize == k.cfg.BlockSize {
			hashes = rp.Hashes
		}
	} else {
		var h blockhash.Hasher
		hashes = h.Append(nil, 0, false, req.Tokens, k.cfg.BlockSize)
	}
	if len(hashes) > 0 {
		_ = k.approx.Store(w.id, hashes)
	}
	k.mu.RLock()
	f := k.flights[req]
	k.mu.RUnlock()
	if f == nil || f.w != w || f.hashes != nil {
		f = k.reserve(req, w, d.PredictedCachedTokens, d.PredictedCachedTokens/k.cfg.BlockSize, k.cfg.Now())
	}
	k.mu.RLock()
	if k.slots[w.slot] == w {
		f.hashes = hashes
		k.active.addBlocks(w, hashes)
	}
	k.mu.RUnlock()
}

// FirstToken implements Observer: prefill is done, so the request's
// blocks are pinned; the engine's cached_tokens grades the prediction, and
// tells whether a BlockStored must follow.
func (k *KV) FirstToken(req *Request, workerID string, cachedTokens int) {
	k.mu.Lock()
	f := k.flights[req]
	if f != nil {
		f.firstDone = true
	}
	k.mu.Unlock()
	if f == nil {
		return
	}
	now := k.cfg.Now()
	k.mu.RLock()
	live := k.slots[f.w.slot] == f.w
	if live {
		k.active.prefillDone(f.w, f.hashes, f.prefillTokens, f.predFinish, now.UnixNano())
	}
	k.mu.RUnlock()
	if cachedTokens < 0 {
		// Not known yet (an upstream that reports usage only at the end,
		// or never): the checks wait for CachedTokensLate. A worker whose
		// stream never delivered a batch cannot have cached a whole
		// block of this prompt that it did not compute and publish, so
		// its first full block is a computed one: a BlockStored must
		// follow, whatever the stream's state, even if the count never
		// comes.
		k.mu.Lock()
		f.lateTTFT = max(now.Sub(f.routedAt), 1)
		k.mu.Unlock()
		if k.events != nil && len(f.hashes) > 0 && f.w.lastEvent.Load() == 0 {
			f.w.expectStored(f.routedAt)
		}
		return
	}
	k.grade(f, live, cachedTokens, now.Sub(f.routedAt))
}

// CachedTokensLate implements LateObserver: the engine's cached_tokens for
// a request whose first token came without them.
func (k *KV) CachedTokensLate(req *Request, workerID string, cachedTokens int) {
	k.mu.Lock()
	f := k.flights[req]
	var ttft time.Duration
	if f != nil {
		ttft, f.lateTTFT = f.lateTTFT, 0
	}
	k.mu.Unlock()
	if f == nil || ttft == 0 || cachedTokens < 0 {
		return
	}
	k.mu.RLock()
	live := k.slots[f.w.slot] == f.w
	k.mu.RUnlock()
	k.grade(f, live, cachedTokens, ttft)
}

// grade checks the routing prediction against the engine's cached tokens.
func (k *KV) grade(f *flight, live bool, cachedTokens int, ttft time.Duration) {
	if live && k.cost.model() == CostTTFT {
		k.gradeTTFT(f, cachedTokens, ttft)
	}
	bs := k.cfg.BlockSize
	actual := cachedTokens / bs
	k.gradePrefix(f, actual, cachedTokens)
	if k.events != nil && len(f.hashes) > actual && !recomputedLast(f, actual, bs) {
		// The engine computed at least one new full block: it must have
		// stored it, and a worker with events on publishes that.
		f.w.expectStored(f.routedAt)
	}
}

// recomputedLast reports whether the one block the engine did not hit is
// the last block of a block-aligned prompt the worker held whole. Engines
// cap a hit at isl-1 tokens (the last token is recomputed for its
// logits), so that block is computed again, not new, and whether it is
// published again differs by engine: vLLM caches the recomputed copy
// without de-duplication and sends BlockStored for it (BlockPool
// cache_full_blocks); SGLang's radix insert of a key it holds and the
// mocker send nothing. Expecting a BlockStored there would raise
// kv_events_missing on a healthy worker after a full-prompt repeat.
func recomputedLast(f *flight, actual, bs int) bool {
	n := len(f.hashes)
	return actual == n-1 && f.isl == n*bs && f.held >= n
}

// Finished implements Observer.
func (k *KV) Finished(req *Request, workerID string) {
	k.mu.Lock()
	f := k.flights[req]
	delete(k.flights, req)
	k.mu.Unlock()
	if f == nil {
		return
	}
	k.mu.RLock()
	if k.slots[f.w.slot] == f.w {
		k.active.free(f.w, f.hashes, f.firstDone, f.prefillTokens, f.work, k.cfg.Now().UnixNano())
	}
	k.mu.RUnlock()
}

// BlockSize is the router's block size: the one prompt hashes are made with.
func (k *KV) BlockSize() int { return k.cfg.BlockSize }

// PromptHashes are the chained hashes of the whole blocks of tokens at the
// router's block size (what Routed indexes).
func (k *KV) PromptHashes(tokens []engine.Token) []uint64 {
	var h blockhash.Hasher
	return h.Append(nil, 0, false, tokens, k.cfg.BlockSize)
}
