package accuracy

import "sync"

// Diagnostic codes of the prefix check.
const (
	DiagPredictionDrift    = "kv_prediction_drift"
	DiagPredictionRecovery = "kv_prediction_recovered"
)

// Defaults of the prefix check.
const (
	DefaultWindow      = 32
	DefaultThreshold   = 0.5
	DefaultRecoverRate = 0.8
)

// Prefix keeps one worker's recent prefix predictions, graded against the
// engine's cached_tokens. The zero value is unusable: call Init.
type Prefix struct {
	mu        sync.Mutex
	threshold float64
	recover   float64
	closed    bool
	ring      []sample
	at        int
	n         int
	// Running sums over the ring.
	close, predictedHits, confirmedHits int
	cached, prompt                      int
	predSum, actSum                     int
	drifting                            bool
}

type sample struct {
	close             bool // within one block
	predictedHit      bool // predicted > 0
	confirmed         bool // predicted > 0 and the engine had it (within a block)
	cached, prompt    int
	predicted, actual int
}

// Init sizes the window (the last window requests): drift is raised when
// fewer than threshold of them were within one block, once half the window
// is filled, and cleared when recover of them are.
func (p *Prefix) Init(window int, threshold, recover float64) {
	p.ring = make([]sample, max(window, 1))
	p.threshold, p.recover = threshold, recover
}

// Close makes every later Grade a no-op (the worker left).
func (p *Prefix) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}

// Verdict is a Grade's outcome over the window.
type Verdict struct {
	// Ratio is the fraction within one block of the engine's report.
	Ratio float64
	// Hit: of the requests predicted to hit the cache, the fraction the
	// engine confirmed (1 with none predicted).
	Hit float64
	// CacheHit is cached prompt tokens over prompt tokens.
	CacheHit float64
	// N is the window's fill; PredictedMean and ActualMean its mean
	// predicted and reported blocks.
	N                         int
	PredictedMean, ActualMean float64
	// Raise and Clear say the drift state changed.
	Raise, Clear bool
}

// Grade adds one request: predicted and actual cached blocks, the engine's
// cached tokens and the prompt's tokens. ok is false once Closed.
func (p *Prefix) Grade(predicted, actual, cachedTokens, promptTokens int) (v Verdict, ok bool) {
	diff := actual - predicted
	s := sample{
		close:        diff >= -1 && diff <= 1,
		predictedHit: predicted > 0,
		confirmed:    predicted > 0 && diff >= -1,
		cached:       cachedTokens,
		prompt:       promptTokens,
		predicted:    predicted,
		actual:       actual,
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return v, false
	}
	p.add(s)
	v.Ratio = float64(p.close) / float64(p.n)
	v.Hit = 1.0
	if p.predictedHits > 0 {
		v.Hit = float64(p.confirmedHits) / float64(p.predictedHits)
	}
	if p.prompt > 0 {
		v.CacheHit = float64(p.cached) / float64(p.prompt)
	}
	full := p.n >= len(p.ring)/2
	switch {
	case !p.drifting && full && v.Ratio < p.threshold:
		p.drifting, v.Raise = true, true
	case p.drifting && v.Ratio >= p.recover:
		p.drifting, v.Clear = false, true
	}
	v.N, v.PredictedMean, v.ActualMean = p.n, float64(p.predSum)/float64(p.n), float64(p.actSum)/float64(p.n)
	return v, true
}

func (p *Prefix) add(s sample) {
	if p.n == len(p.ring) {
		o := p.ring[p.at]
		p.close -= b2i(o.close)
		p.predictedHits -= b2i(o.predictedHit)
		p.confirmedHits -= b2i(o.confirmed)
		p.cached -= o.cached
		p.prompt -= o.prompt
		p.predSum -= o.predicted
		p.actSum -= o.actual
	} else {
		p.n++
	}
	p.ring[p.at] = s
	p.at = (p.at + 1) % len(p.ring)
	p.close += b2i(s.close)
	p.predictedHits += b2i(s.predictedHit)
	p.confirmedHits += b2i(s.confirmed)
	p.cached += s.cached
	p.prompt += s.prompt
	p.predSum += s.predicted
	p.actSum += s.actual
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
