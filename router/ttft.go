package router

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/router/accuracy"
)

// DecodeEstimator is implemented by engines that can tell how long one
// decode step takes (engine/mocker, from its timing polynomial). A prefill
// admitted while requests decode shares their step, so it finishes one
// decode step later.
type DecodeEstimator interface {
	// EstimateDecodeStep is the decode step time in seconds with
	// activeTokens tokens of KV in use; negative while the engine cannot
	// tell.
	EstimateDecodeStep(activeTokens int) float64
}

// The learned timing model: TTFT − predicted wait = a + b·n + d·steps(n)·[decodes],
// n the uncached prompt tokens the engine reported computing, steps(n) the
// scheduler steps its chunked prefill takes, [decodes] 1 when the worker
// was decoding other requests (each of those steps also runs their decode). Fitted by exponentially
// weighted ridge regression towards a prior, so a worker nobody has
// measured yet (an upstream vLLM server, a worker in another process) is
// priced from its first request and its own rates take over as samples
// arrive.
const (
	// The prior is the seeds' Qwen3-0.6B GPU worker (mocker's
	// Qwen3_0_6BTiming): 13.6 ms + 0.0436 ms per token, decode ≈ 6-34 ms.
	priorA = 0.0136    // s
	priorB = 0.0436e-3 // s per token
	priorD = 0.010     // s
	// priorWeight is the prior's strength in samples.
	priorWeight = 2.0
	// learnDecay weighs the past: about the last 50 samples count.
	learnDecay = 0.98
	// Feature scale for n (per thousand tokens), so the normal equations
	// stay well conditioned.
	tokScale = 1e-3
	// defaultChunkTokens is the prefill chunk of a worker that does not
	// say (one in another process, a vLLM server): vLLM's
	// max_num_batched_tokens default for its OpenAI server on GPUs of 70
	// GiB or more (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults;
	// 2,048 on smaller GPUs), and the mocker's.
	defaultChunkTokens = 8192
)

// prefillSteps is how many scheduler steps a chunked prefill of n tokens
// takes when decodes of the step's budget of chunk tokens go to running
// decodes first (vLLM's v1 scheduler and the mocker schedule running
// requests before they admit a new one).
func prefillSteps(n, chunk, decodes int) int {
	c := chunk - decodes
	if c < chunk/2 {
		c = chunk / 2
	}
	if n <= c || c <= 0 {
		return 1 // the common case, without a division: it runs per candidate
	}
	return (n + c - 1) / c
}

// ttft_model_drift thresholds (package accuracy checks them).
const (
	ttftDriftWindow  = accuracy.TTFTWindow
	ttftDriftMinimum = accuracy.TTFTMinimum
	ttftDriftRaise   = accuracy.TTFTRaise
)

// Diagnostic codes of the TTFT cost.
const (
	DiagTTFTDrift     = accuracy.DiagTTFTDrift
	DiagTTFTRecovered = accuracy.DiagTTFTRecovered
)

type ttftCoef struct{ a, b, d float64 }

// timingModel predicts one worker's TTFT and learns from what the worker
// then does (kvWorker.ttftAcc checks the predictions).
type timingModel struct {
	// src is the model as one immutable snapshot (the engine's estimate,
	// capacity and the learned rates), so a decision reads each
	// candidate's with one load.
	src atomic.Pointer[timingSource]
	// fleet is the policy's latest rates learned from any worker: a worker
	// not yet measured is priced with them rather than with the prior, so
	// it is not starved behind measured workers that are faster than the
	// prior says (and it is measured by the traffic it then gets).
	fleet *atomic.Pointer[ttftCoef]

	mu sync.Mutex
	// Weighted normal equations of the fit: s = Σ φφᵀ, r = Σ φ·y.
	s       [3][3]float64
	r       [3]float64
	samples int
}

// OnboardEstimator is an engine with KV tiers below its pool that can say
// how long bringing n tokens' blocks back from them takes, in seconds (the
// mocker's modelled links): the ttft cost adds it for the part of a hit the
// index knows only in a lower tier.
type OnboardEstimator interface {
	EstimateOnboard(tokens int) float64
}

// TierOnboardEstimator is an OnboardEstimator that prices a hit split by
// tier: host tokens from host memory, disk tokens from disk (the worker's
// own or one it shares), each at its link's bandwidth.
type TierOnboardEstimator interface {
	EstimateOnboardTiers(host, disk int) float64
}

// timingSource is what the worker's engine says about its own speed.
type timingSource struct {
	est engine.PrefillEstimator // nil: an engine in another process
	dec DecodeEstimator
	onb OnboardEstimator // nil: onboarding a lower tier's blocks priced as free
	ont TierOnboardEstimator
	// chunk is the engine's prefill chunk (engine.KVStreamer), else
	// defaultChunkTokens.
	chunk int
	// capacity is the worker's KV cache in tokens (0: unknown).
	capacity int
	ttftCoef      // learned
	learned  bool // from at least ttftMinSamples of the worker's own
}

// ttftMinSamples is how many first tokens make a worker's rates its own.
const ttftMinSamples = 4

func newTimingModel(src engine.PrefillEstimator) *timingModel {
	m := &timingModel{}
	m.init(src, 0)
	return m
}

// init starts the model at the prior.
func (m *timingModel) init(src engine.PrefillEstimator, capacityTokens int) {
	m.src.Store(&timingSource{chunk: defaultChunkTokens, ttftCoef: ttftCoef{a: priorA, b: priorB, d: priorD}})
	m.setSource(src, capacityTokens)
}

func (m *timingModel) setSource(src engine.PrefillEstimator, capacityTokens int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.src.Load()
	ts := &timingSource{est: src, capacity: max(capacityTokens, 0), ttftCoef: old.ttftCoef, learned: old.learned}
	ts.dec, _ = src.(DecodeEstimator)
	ts.onb, _ = src.(OnboardEstimator)
	ts.ont, _ = src.(TierOnboardEstimator)
	ts.chunk = defaultChunkTokens
	if ks, ok := src.(engine.KVStreamer); ok && ks.PrefillChunkTokens() > 0 {
		ts.chunk = ks.PrefillChunkTokens()
	}
	m.src.Store(ts)
}

// coefs returns the learned rates.
func (m *timingModel) coefs() ttftCoef { return m.src.Load().ttftCoef }

// ttftMemoryHigh is the share of a worker's KV capacity above which the
// ttft cost treats it as full; the rest is headroom for the running
// requests' outputs.
const ttftMemoryHigh = 0.9

// estimate is how long a prefill of n uncached tokens takes once the
// worker starts it (total), while decodes requests decode with
// activeTokens tokens of KV in use, and its prefill part alone (pre).
// Every step of a chunked prefill also runs the decode batch, so a long
// prompt on a decoding worker pays one decode step per chunk (an
// 87,000-token prompt: 11 steps). The first prefill of an empty queue also
// waits, on average, for half of the decode step in progress when it
// lands. One function for the decision and the queue, reading the model
// once: it runs for every candidate.
func (m *timingModel) estimate(n, decodes, activeTokens int, first bool) (total, pre float64) {
	var fleet *ttftCoef
	if m.fleet != nil {
		fleet = m.fleet.Load()
	}
	return m.src.Load().estimate(fleet, n, decodes, activeTokens, first)
}

// estimate is timingModel.estimate on one snapshot, with the fleet's rates
// (nil: none yet) for a worker not measured yet. A decision loads the
// fleet's rates once and each candidate's snapshot once.
func (src *timingSource) estimate(fleet *ttftCoef, n, decodes, activeTokens int, first bool) (total, pre float64) {
	c := &src.ttftCoef
	if !src.learned && fleet != nil {
		c = fleet
	}
	pre = -1
	if src.est != nil {
		pre = src.est.EstimatePrefill(n)
	}
	if pre < 0 {
		pre = c.a + c.b*float64(n)
	}
	total = pre
	if decodes > 0 {
		d := -1.0
		if src.dec != nil {
			if d = src.dec.EstimateDecodeStep(activeTokens); d >= 0 && first {
				total += d / 2
			}
		}
		if d < 0 {
			d = c.d // the learned step term absorbs the wait for the step in progress
		}
		total += d * float64(prefillSteps(n, src.chunk, decodes))
	}
	return total, pre
}

// predict is the candidate's TTFT in seconds: the wait before its prefill
// can start (the router's virtual queue of prefills it placed there) plus
// the prefill of what the worker will not hold, joined to the decode batch
// it runs alongside; and that prefill's own time. src is the worker's
// timing snapshot, fleet the fleet's rates (estimate), maxHit the most
// blocks a hit can be (an engine recomputes the last prompt token).
func (src *timingSource) predict(fleet *ttftCoef, cs *candScore, isl, bs, maxHit int, now int64) (ttft, prefill float64) {
	hit := min(cs.overlap, maxHit) * bs
	wait := queueStart(cs.busyUntil, cs.prefilling, now) - now
	total, pre := src.estimate(fleet, isl-hit, cs.activeRequests-cs.prefilling, cs.activeUnique*bs+isl, wait == 0)
	if cs.lower > 0 && src.onb != nil {
		// Part of the hit sits in host memory or on disk: it is copied
		// in before the prefill continues.
		n := min(cs.lower, cs.overlap, maxHit)
		var o float64
		if src.ont != nil {
			disk := min(cs.lowerDisk, n)
			o = src.ont.EstimateOnboardTiers((n-disk)*bs, disk*bs)
		} else {
			o = src.onb.EstimateOnboard(n * bs)
		}
		if o > 0 {
			total += o
			pre += o
		}
	}
	return float64(wait)*1e-9 + total, pre
}

// kvFull is how far a request would take the worker's KV memory beyond
// ttftMemoryHigh of its capacity, in capacities (0 when it fits or the
// capacity is unknown). An engine whose running requests hold its memory
// admits nothing new until some finish, and preempts (recomputes) the
// newest when decodes outgrow it (vLLM's scheduler; the mocker's): the
// timing model cannot price that wait, so the cost treats it as a limit.
func (src *timingSource) kvFull(activeTokens int) float64 {
	if src.capacity <= 0 {
		return 0
	}
	return max(float64(activeTokens)/float64(src.capacity)-ttftMemoryHigh, 0)
}

// queueStart is when a prefill routed now to a worker can start: when the
// router's virtual queue drains. Pricing a queue whose prefills are overdue
// as busy for as long again was tried twice: it once spread a shared system
// prompt over half the workers only (TestNoStarvation), and with that fixed
// by the shared-prefix pricing it still lost to Dynamo's cost on the
// Mooncake replay's p99 (docs/benchmarks.md, "Router: figures behind the
// code"): late first tokens on a loaded machine are not a slow worker.
func queueStart(busyUntil int64, _ int, now int64) int64 { return max(busyUntil, now) }

// observe learns from one first token: n uncached tokens (from the
// engine's cached_tokens), whether the worker was decoding, the wait the
// router predicted, the predicted and the observed TTFT.
func (m *timingModel) observe(n int, decoding bool, wait, _, observed time.Duration) {
	y := max(observed-wait, 0).Seconds()
	phi := [3]float64{1, float64(n) * tokScale, 0}
	if decoding {
		phi[2] = float64(prefillSteps(n, m.src.Load().chunk, 0))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range 3 {
		m.r[i] = learnDecay*m.r[i] + phi[i]*y
		for j := range 3 {
			m.s[i][j] = learnDecay*m.s[i][j] + phi[i]*phi[j]
		}
	}
	m.samples++
	if c, ok := m.solve(); ok {
		ts := *m.src.Load()
		ts.ttftCoef = c
		ts.learned = m.samples >= ttftMinSamples
		m.src.Store(&ts)
		if ts.learned && m.fleet != nil {
			m.fleet.Store(&c)
		}
	}
}

// solve returns the ridge estimate (S + λI)θ = r + λθ₀, or false when the
// system is singular. Coefficients are kept physical: a prefill takes time
// and grows with its tokens.
func (m *timingModel) solve() (ttftCoef, bool) {
	prior := [3]float64{priorA, priorB / tokScale, priorD}
	var a [3][4]float64
	for i := range 3 {
		for j := range 3 {
			a[i][j] = m.s[i][j]
		}
		a[i][i] += priorWeight
		a[i][3] = m.r[i] + priorWeight*prior[i]
	}
	for c := range 3 { // Gaussian elimination, partial pivoting
		p := c
		for i := c + 1; i < 3; i++ {
			if math.Abs(a[i][c]) > math.Abs(a[p][c]) {
				p = i
			}
		}
		if math.Abs(a[p][c]) < 1e-12 {
			return ttftCoef{}, false
		}
		a[c], a[p] = a[p], a[c]
		for i := range 3 {
			if i == c {
				continue
			}
			f := a[i][c] / a[c][c]
			for j := c; j < 4; j++ {
				a[i][j] -= f * a[c][j]
			}
		}
	}
	x := [3]float64{a[0][3] / a[0][0], a[1][3] / a[1][1], a[2][3] / a[2][2]}
	for _, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return ttftCoef{}, false
		}
	}
	return ttftCoef{a: max(x[0], 0), b: max(x[1]*tokScale, priorB/100), d: max(x[2], 0)}, true
}

// gradeTTFT checks a first token's TTFT against the prediction made when
// the request was routed, teaches the worker's model, and raises or clears
// ttft_model_drift.
func (k *KV) gradeTTFT(f *flight, cachedTokens int, observed time.Duration) {
	w := f.w
	m := &w.timing
	predicted := time.Duration(f.predFinish - f.routedAt.UnixNano())
	wait := time.Duration(max(f.predStart-f.routedAt.UnixNano(), 0))
	if predicted <= 0 {
		return
	}
	m.observe(max(f.isl-cachedTokens, 1), f.decoding, wait, predicted, observed)
	errMean, raised, cleared := w.ttftAcc.Observe(predicted, observed)
	k.met.ttftRatio.WithLabelValues(w.id).Observe(observed.Seconds() / predicted.Seconds())
	k.met.ttftErr.WithLabelValues(w.id).Set(errMean)
	switch {
	case raised:
		k.drifting.Add(1)
		k.board.Raise(DiagTTFTDrift, w.id, health.Warn,
			fmt.Sprintf("predicted TTFTs of worker %s are off by %.0f%% on average over its last %d requests; decisions that include it use the weighted cost (--router-cost tandem) until they agree again",
				w.id, 100*errMean, ttftDriftWindow),
			"worker", w.id, "mean_relative_error", errMean, "last_predicted_ms", predicted.Milliseconds(), "last_observed_ms", observed.Milliseconds())
	case cleared:
		k.drifting.Add(-1)
		k.board.Clear(DiagTTFTDrift, w.id, DiagTTFTRecovered, "predicted TTFTs agree with the worker again; routing it by predicted TTFT")
	}
}

// TTFTModelState is a worker's TTFT model as it stands, for tests and
// operators.
type TTFTModelState struct {
	// Engine is true when the worker's engine estimates its own prefill.
	Engine bool
	// Learned rates: TTFT − wait ≈ Base + PerToken·uncached + Decode·[decoding].
	Base, PerToken, Decode time.Duration
	Samples                int
	// MeanError is the mean relative error of the last 32 predictions.
	MeanError float64
	Drifting  bool
}

// TTFTModel returns the worker's TTFT model state (false for an unknown
// worker).
func (k *KV) TTFTModel(id string) (TTFTModelState, bool) {
	k.mu.RLock()
	w := k.workers[id]
	k.mu.RUnlock()
	if w == nil {
		return TTFTModelState{}, false
	}
	m := &w.timing
	c := m.coefs()
	st := TTFTModelState{Engine: m.src.Load().est != nil, Base: secs(c.a), PerToken: secs(c.b), Decode: secs(c.d), Drifting: w.ttftAcc.Drifting()}
	m.mu.Lock()
	st.Samples = m.samples
	m.mu.Unlock()
	st.MeanError = w.ttftAcc.MeanError()
	return st, true
}

func secs(s float64) time.Duration { return time.Duration(s * 1e9) }
