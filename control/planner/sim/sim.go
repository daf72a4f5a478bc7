package sim

import (
	"container/heap"
	"container/list"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/tandemllm/tandem/control/planner"
)

// Request is one trace entry: arrival in seconds from the start, lengths
// in tokens, and one id per HashBlock-token prompt block (equal ids are a
// shared prefix, as in Mooncake traces).
type Request struct {
	At       float64
	ISL, OSL int
	Blocks   []int64
}

// Config is one simulation.
type Config struct {
	Worker WorkerSpec
	// HashBlock is the tokens per Request.Blocks id (512 for Mooncake);
	// zero disables prefix caching.
	HashBlock int
	// Disagg runs a prefill pool and a decode pool; otherwise one
	// aggregated pool.
	Disagg bool
	// TransferGBps is the KV transfer bandwidth between pools (default
	// 25 GB/s); KVBytesPerToken the size of one token's KV (the mocker's
	// Qwen3-0.6B default).
	TransferGBps    float64
	KVBytesPerToken int
	// Startup is how long a new worker takes to serve.
	Startup time.Duration
	// Interval is the planner's interval (and the timeline's resolution).
	Interval time.Duration
	Targets  planner.Targets
	// Planner scales the pools; nil holds Static.
	Planner *planner.Planner
	// Static (or initial) replicas by pool name: "agg", or "prefill" and
	// "decode".
	Static map[string]int
}

// Pool names of a simulation.
const (
	PoolAgg     = "agg"
	PoolPrefill = "prefill"
	PoolDecode  = "decode"
)

// Point is the fleet at one planner tick.
type Point struct {
	T        float64        `json:"t"`
	Rate     float64        `json:"rate"`
	Replicas map[string]int `json:"replicas"`
	Ready    map[string]int `json:"ready"`
	// Attain is the share of the interval's finished requests meeting
	// both targets.
	Attain float64 `json:"attainment"`
}

// Result is one simulation's outcome.
type Result struct {
	Requests, Met, MetTTFT, MetITL, Unfinished int
	// Attainment is the share of requests meeting both targets.
	Attainment float64
	// WorkerSeconds is the time every worker existed (starting included),
	// summed, by pool and in total.
	WorkerSeconds     map[string]float64
	TotalWorkerSecond float64
	TTFTp, ITLp       float64 // observed quantiles (Targets.Quantile), ms
	Timeline          []Point
	Decisions         []planner.Decision
	Duration          float64
}

type req struct {
	Request
	id                int
	hit, computed     int
	outputs           int
	firstTok, lastTok float64
	prefillMs         float64 // routed estimate, for the worker's queue cost
	reserved          int
}

type worker struct {
	id         int
	pool       string
	role       planner.Role
	created    float64
	readyAt    float64
	ready      bool
	draining   bool
	removed    bool
	removedAt  float64
	stepping   bool
	waiting    []*req
	running    []*req
	kvReserved int
	queuedMs   float64
	cache      *lru
	items      []item // the step in progress
}

func (w *worker) idle() bool { return len(w.waiting) == 0 && len(w.running) == 0 }

type evKind uint8

const (
	evStep evKind = iota
	evReady
	evTransfer
	evTick
)

type event struct {
	t    float64
	seq  int
	kind evKind
	w    *worker
	r    *req
}

type evHeap []event

func (h evHeap) Len() int { return len(h) }
func (h evHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h evHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *evHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *evHeap) Pop() any {
	o := *h
	e := o[len(o)-1]
	*h = o[:len(o)-1]
	return e
}

type state struct {
	cfg     Config
	spec    WorkerSpec
	now     float64
	ev      evHeap
	seq     int
	workers []*worker
	nextID  int
	pending map[string][]*req // arrived with no ready worker in the pool

	// per-interval observation
	winArr, winISL, winOSL float64
	winISLs                []float64
	winHit, winISLHit      float64
	winTTFT, winITL        []float64
	winMet, winDone        int

	ttft, itl []float64
	res       Result
}

// Run simulates trace under cfg.
func Run(trace []Request, cfg Config) (*Result, error) {
	if len(trace) == 0 {
		return nil, errors.New("sim: empty trace")
	}
	if cfg.Interval <= 0 {
		return nil, errors.New("sim: interval must be positive")
	}
	if cfg.TransferGBps <= 0 {
		cfg.TransferGBps = 25
	}
	if cfg.KVBytesPerToken <= 0 {
		cfg.KVBytesPerToken = 114688
	}
	s := &state{cfg: cfg, spec: cfg.Worker.withDefaults(), pending: map[string][]*req{}}
	s.res.WorkerSeconds = map[string]float64{}
	pools := []string{PoolAgg}
	if cfg.Disagg {
		pools = []string{PoolPrefill, PoolDecode}
	}
	for _, p := range pools {
		n := cfg.Static[p]
		if n < 0 || n > 1<<14 {
			return nil, fmt.Errorf("sim: pool %s: %d replicas out of range", p, n)
		}
		for range n {
			s.addWorker(p, true)
		}
	}
	reqs := make([]*req, len(trace))
	for i, r := range trace {
		if r.ISL < 1 || r.OSL < 0 || r.At < 0 || math.IsNaN(r.At) || r.ISL+r.OSL > s.spec.KVCapacityTokens {
			return nil, fmt.Errorf("sim: request %d: at %v, isl %d, osl %d out of range (KV capacity %d)", i, r.At, r.ISL, r.OSL, s.spec.KVCapacityTokens)
		}
		rr := &req{Request: r, id: i}
		rr.OSL = max(rr.OSL, 1)
		reqs[i] = rr
	}
	slices.SortStableFunc(reqs, func(a, b *req) int { return cmpF(a.At, b.At) })
	s.push(event{t: cfg.Interval.Seconds(), kind: evTick})
	last := reqs[len(reqs)-1].At
	next := 0
	done := 0
	// The horizon guards a fleet that can never finish (a static pool of
	// zero): everything left is counted unfinished.
	horizon := last + 3600
	for done < len(reqs) {
		t := math.Inf(1)
		if next < len(reqs) {
			t = reqs[next].At
		}
		if len(s.ev) > 0 && s.ev[0].t <= t {
			e := heap.Pop(&s.ev).(event)
			if e.t > horizon {
				break
			}
			s.now = e.t
			done += s.handle(e, last)
			continue
		}
		if next >= len(reqs) {
			break
		}
		s.now = t
		r := reqs[next]
		next++
		s.winArr++
		s.winISL += float64(r.ISL)
		s.winISLs = append(s.winISLs, float64(r.ISL))
		s.winOSL += float64(r.OSL)
		s.route(r, s.firstPool())
	}
	s.res.Duration = s.now
	for _, w := range s.workers {
		end := s.now
		if w.removed {
			end = w.removedAt
		}
		s.res.WorkerSeconds[w.pool] += end - w.created
		s.res.TotalWorkerSecond += end - w.created
	}
	s.res.Requests = len(reqs)
	s.res.Unfinished = len(reqs) - done
	if len(reqs) > 0 {
		s.res.Attainment = float64(s.res.Met) / float64(len(reqs))
	}
	s.res.TTFTp = quantile(s.ttft, cfg.Targets.Quantile)
	s.res.ITLp = quantile(s.itl, cfg.Targets.Quantile)
	return &s.res, nil
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *state) firstPool() string {
	if s.cfg.Disagg {
		return PoolPrefill
	}
	return PoolAgg
}

func (s *state) push(e event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.ev, e)
}

func (s *state) addWorker(pool string, ready bool) *worker {
	role := planner.RoleAggregated
	switch pool {
	case PoolPrefill:
		role = planner.RolePrefill
	case PoolDecode:
		role = planner.RoleDecode
	}
	w := &worker{id: s.nextID, pool: pool, role: role, created: s.now, readyAt: s.now}
	s.nextID++
	if s.cfg.HashBlock > 0 {
		w.cache = newLRU(s.spec.KVCapacityTokens / s.cfg.HashBlock)
	}
	if ready {
		w.ready = true
	} else {
		w.readyAt = s.now + s.cfg.Startup.Seconds()
		s.push(event{t: w.readyAt, kind: evReady, w: w})
	}
	s.workers = append(s.workers, w)
	return w
}

// handle processes one event and returns the requests it finished.
func (s *state) handle(e event, last float64) int {
	switch e.kind {
	case evReady:
		if e.w.removed {
			return 0
		}
		e.w.ready = true
		p := s.pending[e.w.pool]
		s.pending[e.w.pool] = nil
		for _, r := range p {
			s.route(r, e.w.pool)
		}
	case evTransfer:
		s.route(e.r, PoolDecode)
	case evStep:
		return s.endStep(e.w)
	case evTick:
		s.tick()
		if s.now <= last+s.cfg.Interval.Seconds() || s.busy() {
			s.push(event{t: s.now + s.cfg.Interval.Seconds(), kind: evTick})
		}
	}
	return 0
}

func (s *state) busy() bool {
	for _, w := range s.workers {
		if !w.removed && !w.idle() {
			return true
		}
	}
	for _, p := range s.pending {
		if len(p) > 0 {
			return true
		}
	}
	return false
}

// uncached is what r would prefill on w.
func (s *state) uncached(r *req, w *worker) int {
	if w.cache == nil {
		return r.ISL
	}
	return r.ISL - min(w.cache.prefix(r.Blocks, false)*s.cfg.HashBlock, r.ISL-1)
}

// route sends r to the cheapest ready worker of pool: for prefill work
// the worker whose queue plus this prompt's uncached prefill is shortest
// (the router's ttft cost), for decode the least KV-loaded worker.
func (s *state) route(r *req, pool string) {
	var best *worker
	bestCost := math.Inf(1)
	for _, w := range s.workers {
		if w.pool != pool || !w.ready || w.draining || w.removed {
			continue
		}
		var c float64
		if pool == PoolDecode {
			c = float64(w.kvReserved) + float64(len(w.waiting))*1e9
		} else {
			// The router's ttft cost: queued prefills, this prompt's
			// uncached prefill, half a decode step if the worker decodes;
			// KV load breaks ties, so idle workers share the work.
			c = w.queuedMs + s.spec.prefillMs(s.uncached(r, w)) + float64(w.kvReserved)*1e-6
			if len(w.running) > 0 {
				c += s.spec.Timing.DecodeMs(float64(w.kvReserved)/float64(s.spec.KVCapacityTokens)) / 2
			}
		}
		if c < bestCost {
			best, bestCost = w, c
		}
	}
	if best == nil {
		s.pending[pool] = append(s.pending[pool], r)
		return
	}
	if pool != PoolDecode {
		r.prefillMs = s.spec.prefillMs(s.uncached(r, best))
		best.queuedMs += r.prefillMs
	}
	best.waiting = append(best.waiting, r)
	s.kick(best)
}

// kick starts a step on w if it is idle and has work.
func (s *state) kick(w *worker) {
	if w.stepping || w.removed || w.idle() {
		return
	}
	ms := s.schedule(w)
	if ms < 0 {
		return
	}
	w.stepping = true
	s.push(event{t: s.now + ms/1000, kind: evStep, w: w})
}

// item is one sequence's share of a step.
type item struct {
	r       *req
	n       int
	prefill bool
}

// schedule forms w's next batch as the mocker does and returns its cost
// in ms, or -1 if nothing can run.
func (s *state) schedule(w *worker) float64 {
	budget := s.spec.MaxNumBatchedTokens
	its := w.items[:0]
	prefill, decodes, active := 0, 0, 0
	for _, r := range w.running {
		if budget <= 0 {
			break
		}
		if r.computed < r.ISL {
			n := min(r.ISL-r.computed, budget)
			its = append(its, item{r, n, true})
			prefill += n
			budget -= n
		} else {
			its = append(its, item{r, 1, false})
			decodes++
			budget--
		}
	}
	for budget > 0 && len(w.waiting) > 0 && len(w.running) < s.spec.MaxNumSeqs {
		r := w.waiting[0]
		need := r.ISL + r.OSL
		if w.role == planner.RolePrefill {
			need = r.ISL
		}
		if w.kvReserved+need > s.spec.KVCapacityTokens {
			break // head-of-line blocking, as in vLLM
		}
		w.waiting = w.waiting[1:]
		w.kvReserved += need
		r.reserved = need
		w.running = append(w.running, r)
		if w.role == planner.RoleDecode {
			its = append(its, item{r, 1, false})
			decodes++
			budget--
			continue
		}
		if w.cache != nil {
			r.hit = min(w.cache.prefix(r.Blocks, true)*s.cfg.HashBlock, r.ISL-1)
		}
		r.computed = r.hit
		s.winHit += float64(r.hit)
		s.winISLHit += float64(r.ISL)
		n := min(r.ISL-r.computed, budget)
		its = append(its, item{r, n, true})
		prefill += n
		budget -= n
	}
	w.items = its
	if len(its) == 0 {
		return -1
	}
	for _, r := range w.running {
		active += r.computed + max(r.outputs-1, 0)
	}
	ms := s.spec.Timing.PrefillMs(prefill)
	if decodes > 0 {
		ms += s.spec.Timing.DecodeMs(float64(active) / float64(s.spec.KVCapacityTokens))
	}
	return ms
}

func (s *state) endStep(w *worker) int {
	w.stepping = false
	done := 0
	for _, it := range w.items {
		r := it.r
		if it.prefill {
			r.computed += it.n
			if r.computed < r.ISL {
				continue
			}
			// The prompt is computed: its blocks are cached and the
			// first token is out.
			if w.cache != nil {
				w.cache.insert(r.Blocks)
			}
			w.queuedMs = max(w.queuedMs-r.prefillMs, 0)
			r.firstTok, r.lastTok = s.now, s.now
			r.outputs = 1
			s.recordTTFT(r)
			if w.role == planner.RolePrefill {
				s.release(w, r)
				if r.OSL <= 1 {
					s.finish(r)
					done++
					continue
				}
				bytes := float64(r.ISL) * float64(s.cfg.KVBytesPerToken)
				s.push(event{t: s.now + bytes/(s.cfg.TransferGBps*1e9), kind: evTransfer, r: r})
				continue
			}
		} else {
			r.outputs++
			r.lastTok = s.now
		}
		if r.outputs >= r.OSL {
			s.release(w, r)
			s.finish(r)
			done++
		}
	}
	clear(w.items)
	w.items = w.items[:0]
	if w.draining && w.idle() {
		s.remove(w)
		return done
	}
	s.kick(w)
	return done
}

func (s *state) release(w *worker, r *req) {
	w.kvReserved -= r.reserved
	r.reserved = 0
	i := slices.Index(w.running, r)
	if i >= 0 {
		w.running = slices.Delete(w.running, i, i+1)
	}
}

func (s *state) recordTTFT(r *req) {
	ms := (r.firstTok - r.At) * 1000
	s.ttft = append(s.ttft, ms)
	s.winTTFT = append(s.winTTFT, ms)
}

func (s *state) finish(r *req) {
	ttft := (r.firstTok - r.At) * 1000
	itl := 0.0
	if r.OSL > 1 {
		itl = (r.lastTok - r.firstTok) * 1000 / float64(r.OSL-1)
		s.itl = append(s.itl, itl)
		s.winITL = append(s.winITL, itl)
	}
	okT, okI := ttft <= s.cfg.Targets.TTFTMs, itl <= s.cfg.Targets.ITLMs
	if okT {
		s.res.MetTTFT++
	}
	if okI {
		s.res.MetITL++
	}
	s.winDone++
	if okT && okI {
		s.res.Met++
		s.winMet++
	}
}

func (s *state) remove(w *worker) {
	w.removed, w.removedAt = true, s.now
}

func (s *state) counts() (all, ready map[string]int) {
	all, ready = map[string]int{}, map[string]int{}
	for _, w := range s.workers {
		if w.removed || w.draining {
			continue
		}
		all[w.pool]++
		if w.ready {
			ready[w.pool]++
		}
	}
	return all, ready
}

func (s *state) tick() {
	iv := s.cfg.Interval.Seconds()
	all, ready := s.counts()
	pt := Point{T: s.now, Rate: s.winArr / iv, Replicas: all, Ready: ready, Attain: math.NaN()}
	if s.winDone > 0 {
		pt.Attain = float64(s.winMet) / float64(s.winDone)
	}
	s.res.Timeline = append(s.res.Timeline, pt)
	if p := s.cfg.Planner; p != nil {
		o := planner.Observation{At: time.Unix(0, 0).Add(time.Duration(s.now * float64(time.Second))), Replicas: all}
		o.Load.Rate = s.winArr / iv
		if s.winArr > 0 {
			o.Load.ISL, o.Load.OSL = s.winISL/s.winArr, s.winOSL/s.winArr
			o.Load.ISLTail = quantile(s.winISLs, s.cfg.Targets.Quantile) / o.Load.ISL
		}
		if s.winISLHit > 0 {
			o.Load.HitFrac = s.winHit / s.winISLHit
		}
		o.TTFTMs = quantile(s.winTTFT, s.cfg.Targets.Quantile)
		o.ITLMs = quantile(s.winITL, s.cfg.Targets.Quantile)
		o.Samples = min(len(s.winTTFT), max(len(s.winITL), len(s.winTTFT)))
		for _, d := range p.Step(o) {
			s.res.Decisions = append(s.res.Decisions, d)
			s.apply(d.Pool, all[d.Pool], d.Desired)
		}
	}
	s.winArr, s.winISL, s.winOSL, s.winHit, s.winISLHit = 0, 0, 0, 0, 0
	s.winTTFT, s.winITL, s.winISLs = s.winTTFT[:0], s.winITL[:0], s.winISLs[:0]
	s.winMet, s.winDone = 0, 0
}

// apply grows or shrinks pool from cur to want workers. Growing starts
// workers that serve after Startup; shrinking first cancels workers still
// starting, then drains the least loaded: a draining worker takes no new
// request and is removed once its last sequence finishes.
func (s *state) apply(pool string, cur, want int) {
	for ; cur < want; cur++ {
		s.addWorker(pool, false)
	}
	for ; cur > want; cur-- {
		var pick *worker
		for _, w := range s.workers {
			if w.pool != pool || w.removed || w.draining {
				continue
			}
			if !w.ready {
				pick = w
				break
			}
			if pick == nil || load(w) < load(pick) {
				pick = w
			}
		}
		if pick == nil {
			return
		}
		pick.draining = true
		if pick.idle() || !pick.ready {
			s.remove(pick)
		}
	}
}

func load(w *worker) int { return w.kvReserved + len(w.waiting)*1 }

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	c := slices.Clone(v)
	slices.Sort(c)
	i := int(math.Ceil(q*float64(len(c)))) - 1
	return c[min(max(i, 0), len(c)-1)]
}

// lru is a worker's prefix cache of block ids.
type lru struct {
	cap int
	l   *list.List
	m   map[int64]*list.Element
}

func newLRU(n int) *lru { return &lru{cap: max(n, 1), l: list.New(), m: map[int64]*list.Element{}} }

// prefix counts the leading blocks present, touching them if use.
func (c *lru) prefix(ids []int64, use bool) int {
	n := 0
	for _, id := range ids {
		e, ok := c.m[id]
		if !ok {
			break
		}
		if use {
			c.l.MoveToFront(e)
		}
		n++
	}
	return n
}

func (c *lru) insert(ids []int64) {
	for _, id := range ids {
		if e, ok := c.m[id]; ok {
			c.l.MoveToFront(e)
			continue
		}
		c.m[id] = c.l.PushFront(id)
		for c.l.Len() > c.cap {
			b := c.l.Back()
			delete(c.m, b.Value.(int64))
			c.l.Remove(b)
		}
	}
}

var discard = slog.New(slog.DiscardHandler)
