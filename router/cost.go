package router

import (
	"fmt"
	"math"
)

// CostModel selects the KV policy's cost function (--router-cost).
type CostModel string

const (
	// CostTTFT (the default) is the predicted time to first token on each
	// candidate: the wait before its prefill can start (the router's own
	// virtual queue of the prefills it placed there, and the decode batch
	// the prefill joins) plus the prefill of the tokens the worker does not
	// hold, from that worker's timing model (the engine's own estimate when
	// it runs in this process, otherwise rates learned online from observed
	// TTFTs and usage, starting from a prior), plus the prefill work the
	// placement adds to that worker (ttftWorkWeight). The cheapest wins;
	// costs within ttftTieBand of the cheapest are a tie, broken by load. A
	// worker whose predictions keep missing (ttft_model_drift) makes the
	// decision fall back to the weighted cost (CostTandem).
	CostTTFT CostModel = "ttft"
	// CostTandem is Dynamo's formula with Tandem's changes: a cached
	// prefix counts as resident in the decode term too (it needs no new KV
	// memory); blocks pinned by the worker's in-flight requests count as
	// cached before their BlockStored arrives; ties go to fewer active
	// requests, the smaller cached footprint, then rotate. A cost in
	// weighted blocks: with concurrent clients its load term can still
	// outweigh a cached prefix (docs/benchmarks.md).
	CostTandem CostModel = "tandem"
	// CostDynamo is Dynamo's classic selector, kept as a baseline:
	// logit = w·prefill_blocks + decode_blocks, argmin, ties broken by the
	// smallest tree size, then at random (the DefaultWorkerSelector of
	// ai-dynamo/dynamo's KV router).
	CostDynamo CostModel = "dynamo"
)

// CostModels lists the values of --router-cost.
const CostModels = "ttft (default), tandem, dynamo"

// ParseCostModel parses the --router-cost flag.
func ParseCostModel(s string) (CostModel, error) {
	switch CostModel(s) {
	case "", CostTTFT:
		return CostTTFT, nil
	case CostTandem:
		return CostTandem, nil
	case CostDynamo:
		return CostDynamo, nil
	}
	return "", fmt.Errorf("router: unknown cost model %q (want %s)", s, CostModels)
}

// cost is one routing cost function: it prices every candidate of a
// decision (lower is better, in its own unit) and resolves ties. The kv
// policy computes the inputs (overlaps, in-flight load) once; a cost only
// combines them, so switching costs changes nothing else.
type cost interface {
	model() CostModel
	// score sets c.logit for every candidate in sc.cands.
	score(k *KV, sc *pickScratch, isl int, now int64)
	// band is how far above the cheapest a cost still ties.
	band(minCost float64) float64
	// breakTie picks among ties (indexes into sc.cands, at least two).
	breakTie(k *KV, sc *pickScratch, ties []int) int
}

func newCost(m CostModel) (cost, error) {
	switch m {
	case CostTTFT:
		return ttftCost{}, nil
	case CostTandem:
		return weightedCost{tandem: true}, nil
	case CostDynamo:
		return weightedCost{}, nil
	}
	return nil, fmt.Errorf("router: unknown cost model %q", m)
}

// weightedCost is Dynamo's cost in weighted blocks, and Tandem's variant.
type weightedCost struct{ tandem bool }

func (c weightedCost) model() CostModel {
	if c.tandem {
		return CostTandem
	}
	return CostDynamo
}

func (c weightedCost) score(k *KV, sc *pickScratch, isl int, _ int64) {
	bs := k.cfg.BlockSize
	requestBlocks := (isl + bs - 1) / bs
	for i := range sc.cands {
		cs := &sc.cands[i]
		s := int32(cs.w.slot)
		overlap := cs.overlap
		if c.tandem {
			// Blocks of a request past its first token on this worker are in
			// its cache for as long as the request runs, whether or not
			// their BlockStored has arrived yet.
			overlap = max(overlap, int(sc.pinnedLead[s]))
		}
		resident := int(sc.activeMatch[s])
		if c.tandem {
			// A cached prefix needs no new KV memory either: the engine
			// reactivates those blocks. Dynamo counts only in-flight blocks
			// as already there, so a worker holding the prefix but one
			// request busier loses it to an idle worker that must
			// recompute it and evict something else to make room.
			resident = max(resident, overlap)
		}
		cs.overlap = overlap
		cs.logit = dynamoLogit(k.cfg.OverlapWeight, bs, isl, overlap, cs.activePrefill, cs.activeUnique, requestBlocks-resident)
	}
}

// dynamoLogit is Dynamo's classic cost, lower is better:
//
//	prefill_blocks = (active_prefill_tokens + isl − overlap·block_size) / block_size   (f64, not rounded)
//	decode_blocks  = active unique blocks + blocks of this request not already active
//	logit          = w·prefill_blocks + decode_blocks
func dynamoLogit(w float64, bs, isl, overlap, activePrefill, activeUnique, newBlocks int) float64 {
	prefillTokens := activePrefill + max(isl-overlap*bs, 0)
	return w*float64(prefillTokens)/float64(bs) + float64(activeUnique+newBlocks)
}

func (weightedCost) band(minCost float64) float64 { return 1e-9 * max(1, math.Abs(minCost)) }

func (c weightedCost) breakTie(k *KV, sc *pickScratch, ties []int) int {
	cs := sc.cands
	if c.tandem {
		return k.spreadTie(sc, ties)
	}
	// Dynamo: smallest tree size, then at random.
	ties = keepMin(ties, func(i int) float64 { return float64(k.footprint(&cs[i])) })
	if len(ties) == 1 {
		return ties[0]
	}
	k.rngMu.Lock()
	defer k.rngMu.Unlock()
	return ties[k.rng.IntN(len(ties))]
}

// spreadTie is Tandem's tie rule: the less loaded, then the smaller cached
// footprint (which spreads new prefixes so each worker's working set stays
// small), then a deterministic rotation.
func (k *KV) spreadTie(sc *pickScratch, ties []int) int {
	cs := sc.cands
	ties = keepMin(ties, func(i int) float64 { return float64(cs[i].activeRequests) })
	ties = keepMin(ties, func(i int) float64 { return float64(k.footprint(&cs[i])) })
	if len(ties) == 1 {
		return ties[0]
	}
	k.rngMu.Lock()
	n := k.rotate
	k.rotate++
	k.rngMu.Unlock()
	return ties[n%uint64(len(ties))]
}

// ttftTieBand: predicted TTFTs within this fraction of the cheapest are
// a tie. The prediction is not better than that (the router cannot see
// where inside a step the engine is), and breaking those ties by load is
// what spreads cold traffic instead of piling it on one worker.
const ttftTieBand = 0.05

// ttftWorkWeight prices the prefill work a placement adds to the worker,
// on top of the request's own TTFT: every request that reaches that worker
// while the prefill runs waits for it. Minimising the TTFT alone is
// greedy: under load it recomputes a cached 1,500-token prefix on a worker
// a few milliseconds less busy, whose queue then delays the next requests
// (and whose cache loses another prefix to the copy). On the seed workload
// with 8 clients weight 1 kept re-requests on their prefix where weight 0
// did not, at a lower mean TTFT (docs/benchmarks.md, "Router: figures
// behind the code"). For cold requests the work is the same everywhere and
// the weight changes nothing. The weight is discounted by the share of
// in-flight requests that share the prefix (score): copying a prefix all
// traffic needs is what spreads a shared system prompt over the workers.
const ttftWorkWeight = 1.0

// ttftSharedMin is how many requests in flight must share a prefix before
// the ttft cost prices it as held everywhere (score): a system prompt is
// carried by every request, a conversation's prefix by one to three.
const ttftSharedMin = 4

// ttftCost is CostTTFT.
type ttftCost struct{}

func (ttftCost) model() CostModel { return CostTTFT }

func (ttftCost) score(k *KV, sc *pickScratch, isl int, now int64) {
	bs := k.cfg.BlockSize
	deepest := 0
	for i := range sc.cands {
		cs := &sc.cands[i]
		s := int32(cs.w.slot)
		// What the worker will hold when this request's prefill starts: its
		// cache, the blocks pinned by its running requests, and the blocks
		// its queued prefills are computing now (an engine serves its queue
		// in order, so they are committed before this request is admitted).
		cs.overlap = max(cs.overlap, int(sc.pinnedLead[s]), int(sc.activeMatch[s]))
		deepest = max(deepest, cs.overlap)
	}
	// A copy of a prefix that most of the traffic in flight shares (a
	// system prompt) is an investment, not a cost: the requests behind it
	// hit it. The work term is discounted by that share.
	weight := ttftWorkWeight
	share, sharing := 0.0, 0
	if deepest > 0 && sc.inFlight > 0 {
		sharing = sc.inFlightSharing(deepest)
		share = min(float64(sharing)/float64(sc.inFlight), 1)
		weight *= 1 - share
	}
	// The copy's own prefill is an investment too when nearly all traffic
	// shares the prefix: every worker will hold it after its first such
	// request, and pricing that one prefill in full kept a shared system
	// prompt on the workers that happened to compute it first, load or no
	// load (TestNoStarvation left workers idle; docs/benchmarks.md). So the
	// candidate's TTFT moves from its own towards the one it would have
	// holding the prefix, by share², which is ~1 for a system prompt and
	// small for a prefix a few requests in flight share (a conversation's
	// next turn, the seed experiment's re-requests), whose holder must
	// keep winning.
	// It takes ttftSharedMin requests in flight: with few in flight, one
	// re-request behind its prefix's first request is "all the traffic"
	// (the seed experiment at 4 clients lost hits that way).
	held := share * share
	if held < 0.25 || sharing < ttftSharedMin {
		held = 0 // not a prefix "all traffic" shares; skip the second estimate
	}
	// One load of the fleet's rates per decision and of each candidate's
	// timing snapshot; everything in float seconds (this loop runs for
	// every candidate: with a thousand it is a good part of the decision).
	fleet := k.fleetCoef.Load()
	maxHit, islBlocks := max(isl-1, 0)/bs, isl/bs
	for i := range sc.cands {
		cs := &sc.cands[i]
		src := cs.w.timing.src.Load()
		ttft, work := src.predict(fleet, cs, isl, bs, maxHit, now)
		if held > 0 && cs.overlap < deepest {
			own := cs.overlap
			cs.overlap = deepest
			t, _ := src.predict(fleet, cs, isl, bs, maxHit, now)
			cs.overlap = own
			ttft = t + (1-held)*(ttft-t)
		}
		cs.logit = ttft + weight*work
		// Its blocks join the worker's running set unless a request in
		// flight there holds them already (cached blocks are reactivated,
		// not shared).
		inFlight := min(int(sc.activeMatch[cs.w.slot]), islBlocks)
		if full := src.kvFull(cs.activeUnique*bs + isl - inFlight*bs); full > 0 {
			// A worker out of KV memory only if every one is, the least
			// full first.
			cs.logit += 1e3 * (1 + full)
		}
	}
}

func (ttftCost) band(minCost float64) float64 { return ttftTieBand*minCost + 1e-12 }

func (ttftCost) breakTie(k *KV, sc *pickScratch, ties []int) int { return k.spreadTie(sc, ties) }
