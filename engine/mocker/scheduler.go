package mocker

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/kvcache"
	"github.com/tandemllm/tandem/structured"
)

type seqState uint8

const (
	stateWaiting seqState = iota
	stateRunning
	stateFinished
)

// seq is one request inside the scheduler.
type seq struct {
	pipe      *engine.Pipe
	stopAbort func() bool

	tokens     []engine.Token // prompt, then outputs
	promptLen  int
	maxTokens  int
	minTokens  int
	ignoreEOS  bool
	stop       []engine.Token
	natural    int    // natural end length, 0 = none
	vocabStart uint64 // offset into the vocabulary cycle
	logprobs   bool   // synthesize logprobs (Request.Logprobs)
	topLP      int    // alternatives per position
	// script is the scripted reply when scripted: its tokens, then EOS.
	script   []engine.Token
	scripted bool
	// matcher, for a request with a Constraint: tokens are drawn
	// uniformly among those its mask allows (the mask's own test).
	matcher *structured.Matcher

	kv         kvcache.Seq
	computed   int // tokens whose K/V is in the cache
	prefillEnd int // len(tokens) at (re-)admission: below it, work is prefill
	outputs    int
	cached     int // prefix hit at first admission, reported to the client
	admitted   bool
	state      seqState
	// readyAt, while set, is when the blocks this sequence onboarded from
	// the lower tiers are in the pool: until then it holds its blocks but
	// is not scheduled (vLLM's WAITING_FOR_REMOTE_KVS), and the step loop
	// runs everyone else.
	readyAt time.Time

	arrival, lastToken time.Time
}

// mix is SplitMix64's finalizer: a cheap, well-spread bijection for
// deriving per-request offsets from seeds.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func newSeq(e *Engine, req *engine.Request, maxTokens int) *seq {
	s := &seq{
		promptLen: len(req.Prompt),
		maxTokens: maxTokens,
		minTokens: req.MinTokens,
		ignoreEOS: req.IgnoreEOS,
		stop:      req.StopTokens,
		arrival:   e.clock.Now(),
		logprobs:  req.Logprobs,
		topLP:     req.TopLogprobs,
	}
	s.tokens = make([]engine.Token, len(req.Prompt), len(req.Prompt)+min(maxTokens, 512))
	copy(s.tokens, req.Prompt)
	// The output stream depends on the worker seed and either the client's
	// sampling seed or, without one, the prompt: the same request always
	// gets the same answer, different prompts get different ones.
	key := req.Sampling.Seed
	if !req.Sampling.HasSeed {
		key = 0xcbf29ce484222325
		for _, t := range req.Prompt {
			key = mix(key ^ uint64(uint32(t)))
		}
	}
	s.vocabStart = mix(e.cfg.Seed ^ mix(key))
	s.script, s.scripted = e.cfg.Script.Reply(req.Prompt)
	if n := e.cfg.MaxNaturalTokens; n > 0 {
		s.natural = max(1+int(mix(s.vocabStart+1)%uint64(n)), s.minTokens+1)
	}
	return s
}

// seqQueue is the waiting queue: FIFO, with preempted sequences going back
// to the front as in vLLM.
type seqQueue struct {
	q    []*seq
	head int
}

func (q *seqQueue) len() int { return len(q.q) - q.head }

func (q *seqQueue) front() *seq {
	if q.head == len(q.q) {
		return nil
	}
	return q.q[q.head]
}

func (q *seqQueue) pop() {
	q.q[q.head] = nil
	q.head++
	if q.head == len(q.q) {
		q.q, q.head = q.q[:0], 0
	}
}

func (q *seqQueue) push(s *seq) { q.q = append(q.q, s) }

func (q *seqQueue) pushFront(s *seq) {
	if q.head > 0 {
		q.head--
		q.q[q.head] = s
		return
	}
	q.q = slices.Insert(q.q, 0, s)
}

// stepItem is one sequence's work in a step: n tokens to compute.
type stepItem struct {
	s       *seq
	n       int
	prefill bool
}

// run is the scheduler goroutine. It blocks on wake whenever there is
// nothing to do, so an idle worker costs no CPU.
func (e *Engine) run() {
	defer close(e.done)
	for {
		if !e.drain() {
			e.shutdown()
			return
		}
		if len(e.running) == 0 && e.waiting.len() == 0 {
			e.publishLoad()
			<-e.wake
			continue
		}
		switch ok, stopped := e.step(); {
		case stopped:
			e.shutdown()
			return
		case !ok:
			// Work exists but none can be scheduled now: wait for news
			// (a finish frees blocks, an abort, a close).
			<-e.wake
		}
	}
}

// drain moves the inbox into the scheduler: new sequences join the waiting
// queue, aborted ones release their blocks at once (so a cancelled request
// frees its KV within the 100 ms contract even mid-step), commands run. It
// reports false once the engine is closed.
func (e *Engine) drain() bool {
	e.mu.Lock()
	in, aborts, cmds, closed := e.inbox, e.aborts, e.commands, e.closed
	e.inbox, e.aborts, e.commands = nil, nil, nil
	e.mu.Unlock()
	for _, s := range in {
		e.waiting.push(s)
		e.loadWaiting.Add(1)
	}
	for _, s := range aborts {
		e.finish(s, reasonAbort, engine.FinishCancelled)
	}
	for _, f := range cmds {
		f()
	}
	return !closed
}

// step schedules, simulates and completes one batch. ok is false when
// nothing could be scheduled; stopped is true when Close arrived while the
// step was sleeping.
func (e *Engine) step() (ok, stopped bool) {
	var t0 time.Time
	if e.cfg.StepObserver != nil {
		t0 = e.clock.Now()
	}
	e.schedule()
	if len(e.items) == 0 {
		e.flushEvents()
		e.publishLoad()
		if at, ok := e.nextOnboard(); ok {
			// Only copies are in flight: wait for the first to land.
			if !e.sleep(max(at.Sub(e.clock.Now()), 0)) {
				return true, true
			}
			return true, false
		}
		return false, false
	}
	if d := e.cfg.stepDuration(e.stepMs()); d > 0 {
		// Blocks were just allocated; let the router see them during a
		// long step rather than only after it.
		e.publishLoad()
		if !e.sleep(d) {
			return true, true
		}
	}
	if e.cfg.StepObserver != nil {
		// Shape before complete (it advances computed), and observed before
		// complete too: complete ends streams, and a caller who has seen its
		// stream end must find the step that ended it already observed.
		st := e.stepShape()
		st.Duration = e.clock.Now().Sub(t0)
		e.cfg.StepObserver.ObserveStep(st)
	}
	e.complete()
	// Drop the step's references so an idle worker retains no finished
	// sequence.
	clear(e.items)
	e.items = e.items[:0]
	e.flushEvents()
	e.steps++
	if e.validate && e.validateErr == nil {
		e.validateErr = e.checkInvariants()
	}
	e.publishLoad()
	return true, false
}

// stepMs is the timing model's cost of the scheduled batch.
func (e *Engine) stepMs() float64 {
	prefill, decodes := 0, 0
	for _, it := range e.items {
		if it.prefill {
			prefill += it.n
		} else {
			decodes++
		}
	}
	ms := e.cfg.Timing.PrefillMs(prefill)
	if decodes > 0 {
		ms += e.cfg.Timing.DecodeMs(e.cache.Stats().Usage())
	}
	return ms
}

// stepShape describes the scheduled batch for the step observer.
func (e *Engine) stepShape() engine.StepStats {
	var st engine.StepStats
	for _, it := range e.items {
		if it.prefill {
			st.PrefillSeqs++
			st.PrefillTokens += it.n
			st.PrefillCachedTokens += it.s.computed
		} else {
			st.DecodeSeqs++
			st.DecodeContextTokens += it.s.computed + it.n
		}
	}
	return st
}

// sleep waits d of simulated time while still serving the inbox, so aborts
// and new arrivals are handled during long steps. It reports false if the
// engine was closed meanwhile.
func (e *Engine) sleep(d time.Duration) bool {
	t := e.clock.After(d)
	for {
		select {
		case <-t:
			return true
		case <-e.wake:
			if !e.drain() {
				return false
			}
		}
	}
}

// schedule builds e.items like vLLM's v1 scheduler: running sequences first
// (decodes and unfinished chunked prefills), each taking up to the token
// budget; when blocks run out the newest running sequence is preempted
// (freed, to be recomputed later, its full blocks staying in the prefix
// cache). Waiting sequences are admitted FIFO only if nothing was
// preempted, after matching their longest cached prefix.
func (e *Engine) schedule() {
	clear(e.items)
	e.items = e.items[:0]
	live := e.running[:0]
	for _, s := range e.running {
		if s.state == stateRunning {
			live = append(live, s)
		}
	}
	clear(e.running[len(live):])
	e.running = live

	budget := e.cfg.MaxNumBatchedTokens
	preempted := false
	now := e.clock.Now()
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		if !s.readyAt.IsZero() {
			if s.readyAt.After(now) {
				continue // its onboard is still copying
			}
			e.clearOnboard(s)
		}
		n := min(len(s.tokens)-s.computed, budget)
		scheduled := true
		for e.cache.Allocate(&s.kv, s.computed+n) != nil {
			victim := e.running[len(e.running)-1]
			e.running[len(e.running)-1] = nil
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == s {
				scheduled = false
				break
			}
		}
		if !scheduled {
			break
		}
		e.items = append(e.items, stepItem{s: s, n: n, prefill: s.computed < s.prefillEnd})
		budget -= n
	}
	if preempted {
		return
	}
	for budget > 0 && len(e.running) < e.cfg.MaxNumSeqs {
		s := e.waiting.front()
		if s == nil {
			break
		}
		if s.state == stateFinished {
			e.waiting.pop()
			continue
		}
		// vLLM always recomputes at least the last token (it needs its
		// logits), so at most len-1 tokens can hit.
		hit, ob := e.cache.AcquireTiers(&s.kv, s.tokens[:len(s.tokens)-1], e.onboards, nil)
		e.onboards = ob
		need := len(s.tokens) - hit
		n := min(need, budget)
		if (e.cfg.DisableChunkedPrefill && n < need) || e.cache.Allocate(&s.kv, hit+n) != nil {
			// Head-of-line blocking, as in vLLM: retry next step.
			e.cache.Free(&s.kv)
			break
		}
		e.waiting.pop()
		e.loadWaiting.Add(-1)
		e.stats.prefixQueries.Add(uint64(len(s.tokens)))
		e.stats.prefixHits.Add(uint64(hit))
		if !s.admitted {
			s.cached = hit
			s.admitted = true
			e.stats.queue.observe(now.Sub(s.arrival).Seconds())
		}
		s.computed = hit
		s.prefillEnd = len(s.tokens)
		s.state = stateRunning
		e.running = append(e.running, s)
		if len(ob) > 0 {
			if at := e.onboardDone(ob, now); at.After(now) {
				s.readyAt = at
				e.onboarding++
				continue // scheduled once its blocks are in
			}
		}
		e.items = append(e.items, stepItem{s: s, n: n, prefill: true})
		budget -= n
	}
}

// onboardDone charges the simulated links for copying ob into the pool and
// returns when the copy completes. Each link serves earlier onboards first;
// disk reads and host copies are pipelined (onboardWall), so an onboard
// from disk ends one block's host copy after its last read, or when the
// host link has carried all its blocks, whichever is later.
func (e *Engine) onboardDone(ob []kvcache.Onboard, now time.Time) time.Time {
	n2, n3 := 0, 0
	for _, o := range ob {
		if o.Shared {
			e.stats.sharedOnboard.Add(1)
		}
		if o.From == kvcache.TierG3 {
			n3++
		} else {
			n2++
		}
	}
	blockBytes := int64(e.cfg.BlockSize) * int64(e.cfg.KVBytesPerToken)
	disk, host := e.cfg.Tiers.onboardSeconds(n2, n3, blockBytes)
	e.stats.onboardBlocks[kvcache.TierG2].Add(uint64(n2))
	e.stats.onboardBlocks[kvcache.TierG3].Add(uint64(n3))
	at := later(now, e.hostFree).Add(e.cfg.stepDuration(host * 1000))
	e.hostFree = at
	if n3 > 0 {
		var read time.Time
		if sd := e.cfg.Tiers.Shared; sd != nil {
			read = sd.read(now, e.cfg.stepDuration(disk*1000))
		} else {
			read = later(now, e.diskFree).Add(e.cfg.stepDuration(disk * 1000))
			e.diskFree = read
		}
		_, last := e.cfg.Tiers.onboardSeconds(1, 0, blockBytes)
		at = later(at, read.Add(e.cfg.stepDuration(last*1000)))
	}
	e.stats.onboard.observe(at.Sub(now).Seconds())
	return at
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// nextOnboard is the earliest time a running sequence's onboard lands.
func (e *Engine) nextOnboard() (time.Time, bool) {
	if e.onboarding == 0 {
		return time.Time{}, false
	}
	var at time.Time
	for _, s := range e.running {
		if s.state == stateRunning && !s.readyAt.IsZero() && (at.IsZero() || s.readyAt.Before(at)) {
			at = s.readyAt
		}
	}
	return at, !at.IsZero()
}

// clearOnboard marks s's onboard done (landed, or moot: s was preempted or
// finished).
func (e *Engine) clearOnboard(s *seq) {
	if !s.readyAt.IsZero() {
		s.readyAt = time.Time{}
		e.onboarding--
	}
}

func (e *Engine) preempt(s *seq) {
	e.clearOnboard(s)
	e.cache.Free(&s.kv)
	s.computed = 0
	s.state = stateWaiting
	e.waiting.pushFront(s)
	e.loadWaiting.Add(1)
	e.stats.preemptions.Add(1)
}

// complete applies the step: computed tokens advance, newly full blocks are
// committed (publishing BlockStored), and every sequence whose known tokens
// are all computed samples its next token.
func (e *Engine) complete() {
	now := e.clock.Now()
	for _, it := range e.items {
		s := it.s
		if s.state != stateRunning {
			continue // aborted while the step ran
		}
		s.computed += it.n
		e.cache.Commit(&s.kv, s.tokens[:s.computed])
		if s.computed == len(s.tokens) {
			e.emit(s, now)
		}
	}
}

func (e *Engine) nextToken(s *seq) engine.Token {
	if s.matcher != nil {
		t, err := s.matcher.Pick(mix(s.vocabStart ^ mix(uint64(s.outputs))))
		if err == nil {
			return t
		}
		// Only a spent state budget gets here (a compiled grammar
		// always allows something): end the sequence.
		slog.Warn("mocker: structured output ended early", "err", err)
		if len(e.cfg.EOS) > 0 {
			return e.cfg.EOS[0]
		}
	}
	vocab := e.cfg.Vocabulary
	if len(vocab) == 0 {
		vocab = s.tokens[:s.promptLen]
	}
	return vocab[(s.vocabStart+uint64(s.outputs))%uint64(len(vocab))]
}

func isIn(t engine.Token, set []engine.Token) bool {
	return slices.Contains(set, t)
}

// emit samples one token for s and delivers it.
func (e *Engine) emit(s *seq, now time.Time) {
	k := s.outputs + 1
	t := e.nextToken(s)
	finish, reason := engine.FinishNone, reasonStop
	switch {
	case s.matcher != nil:
		if err := s.matcher.Accept(t); err != nil || s.matcher.Done() {
			finish = engine.FinishStop
		} else if k >= s.maxTokens {
			finish, reason = engine.FinishLength, reasonLength
		}
	case s.scripted:
		// A scripted reply is written as is (its tokens are never taken
		// for a stop token), then EOS; max_tokens still cuts it.
		switch {
		case s.outputs < len(s.script):
			t = s.script[s.outputs]
			if k == len(s.script) && len(e.cfg.EOS) == 0 {
				finish = engine.FinishStop
			}
		case len(e.cfg.EOS) > 0:
			t, finish = e.cfg.EOS[0], engine.FinishStop
		default:
			finish = engine.FinishStop
		}
		if finish == engine.FinishNone && k >= s.maxTokens {
			finish, reason = engine.FinishLength, reasonLength
		}
	case s.natural > 0 && k >= s.natural && !s.ignoreEOS:
		if len(e.cfg.EOS) > 0 {
			t = e.cfg.EOS[0]
		}
		finish = engine.FinishStop
	case k > s.minTokens && (isIn(t, s.stop) || (!s.ignoreEOS && isIn(t, e.cfg.EOS))):
		finish = engine.FinishStop
	case k >= s.maxTokens:
		finish, reason = engine.FinishLength, reasonLength
	}
	s.tokens = append(s.tokens, t)
	s.outputs = k
	e.tok1[0] = t
	d := engine.Delta{Tokens: e.tok1[:], Finish: finish}
	if s.logprobs {
		d.Logprobs = []engine.TokenLogprob{e.synthLogprob(s, t, k)}
	}
	if k == 1 {
		d.PromptTokens, d.CachedTokens = s.promptLen, s.cached
		e.stats.ttft.observe(now.Sub(s.arrival).Seconds())
		e.stats.promptTokens.Add(uint64(s.promptLen))
	} else {
		e.stats.itl.observe(now.Sub(s.lastToken).Seconds())
	}
	s.lastToken = now
	e.stats.generationTokens.Add(1)
	delivered := s.pipe.Send(d)
	switch {
	case finish != engine.FinishNone:
		e.finish(s, reason, finish)
	case !delivered:
		// The consumer went away without its context ending.
		e.finish(s, reasonAbort, engine.FinishCancelled)
	}
}

// finish retires s: its blocks go back to the cache and, for an abort, its
// stream ends with FinishCancelled.
func (e *Engine) finish(s *seq, reason int, fr engine.FinishReason) {
	if s.state == stateFinished {
		return
	}
	if s.state == stateWaiting {
		e.loadWaiting.Add(-1)
	}
	e.clearOnboard(s)
	e.cache.Free(&s.kv)
	s.state = stateFinished
	if s.stopAbort != nil {
		s.stopAbort()
	}
	if reason == reasonAbort {
		s.pipe.Send(engine.Delta{Finish: fr})
	}
	e.stats.success[reason].Add(1)
	e.stats.e2e.observe(e.clock.Now().Sub(s.arrival).Seconds())
}

// flushEvents publishes the step's KV events as one batch.
func (e *Engine) flushEvents() {
	if e.pub == nil {
		return
	}
	e.pub.EndStep(float64(e.clock.Now().UnixNano()) / 1e9)
}

func (e *Engine) publishLoad() {
	n := 0
	for _, s := range e.running {
		if s.state == stateRunning {
			n++
		}
	}
	e.loadRunning.Store(int64(n))
	e.loadUsedBlocks.Store(int64(e.cache.Stats().Used))
	if e.cache.HasTiers() {
		e.stats.snapshotTiers(e.cache.TierStats())
	}
}

// shutdown fails every live sequence with engine.ErrClosed.
func (e *Engine) shutdown() {
	e.mu.Lock()
	in := e.inbox
	e.inbox = nil
	e.mu.Unlock()
	fail := func(s *seq) {
		if s == nil || s.state == stateFinished {
			return
		}
		e.cache.Free(&s.kv)
		s.state = stateFinished
		if s.stopAbort != nil {
			s.stopAbort()
		}
		s.pipe.Fail(engine.ErrClosed)
	}
	for _, s := range e.running {
		fail(s)
	}
	for _, s := range e.waiting.q[e.waiting.head:] {
		fail(s)
	}
	for _, s := range in {
		fail(s)
	}
	e.running, e.waiting = nil, seqQueue{}
	e.onboarding = 0
	e.loadRunning.Store(0)
	e.loadWaiting.Store(0)
	e.flushEvents()
}

// checkInvariants verifies the KV cache against the sequences that should
// hold blocks: refcounts match, nothing leaked, no in-use block evictable.
func (e *Engine) checkInvariants() error {
	var held []*kvcache.Seq
	for _, s := range e.running {
		if s.state == stateRunning {
			held = append(held, &s.kv)
		}
	}
	for _, s := range e.waiting.q[e.waiting.head:] {
		if len(s.kv.Blocks()) != 0 {
			return fmt.Errorf("waiting sequence holds %d blocks", len(s.kv.Blocks()))
		}
	}
	return e.cache.Validate(held...)
}

// synthLogprob makes up the logprob of the k-th output token t of s, and
// its alternatives. They are synthetic: the mocker has no model, so it
// only promises a well-formed, deterministic distribution. The chosen
// token is the most likely, with a probability between 0.5 and 0.95 drawn
// from the sequence's stream; the alternatives are the next distinct
// tokens of the vocabulary cycle, each with half the previous one's share
// of the rest, so the probabilities named sum to less than 1.
func (e *Engine) synthLogprob(s *seq, t engine.Token, k int) engine.TokenLogprob {
	h := mix(s.vocabStart ^ mix(uint64(k)))
	p0 := 0.5 + 0.45*float64(h>>11)/float64(uint64(1)<<53)
	lp := engine.TokenLogprob{Token: t, Logprob: float32(math.Log(p0))}
	if s.topLP == 0 {
		return lp
	}
	lp.Top = make([]engine.TopLogprob, 1, s.topLP)
	lp.Top[0] = engine.TopLogprob{Token: t, Logprob: lp.Logprob}
	vocab := e.cfg.Vocabulary
	if len(vocab) == 0 {
		vocab = s.tokens[:s.promptLen]
	}
	rest := 1 - p0
	// Bounded walk: a vocabulary with few distinct tokens gives fewer
	// alternatives.
	for i := 1; i <= 4*s.topLP && len(lp.Top) < s.topLP && i < len(vocab); i++ {
		alt := vocab[(s.vocabStart+uint64(k-1)+uint64(i))%uint64(len(vocab))]
		if slices.ContainsFunc(lp.Top, func(x engine.TopLogprob) bool { return x.Token == alt }) {
			continue
		}
		rest /= 2
		lp.Top = append(lp.Top, engine.TopLogprob{Token: alt, Logprob: float32(math.Log(rest))})
	}
	return lp
}
