package accuracy

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Diagnostic codes of the TTFT check.
const (
	DiagTTFTDrift     = "ttft_model_drift"
	DiagTTFTRecovered = "ttft_model_recovered"
)

// Thresholds of ttft_model_drift over the last TTFTWindow first tokens: the
// mean relative error |observed − predicted| / max(observed, predicted)
// raises it above TTFTRaise once TTFTMinimum are in, and clears it below
// TTFTClear.
const (
	TTFTWindow  = 32
	TTFTMinimum = 16
	TTFTRaise   = 0.5 // typically off by 2×
	TTFTClear   = 0.3
)

// TTFT keeps one worker's recent TTFT prediction errors. The zero value is
// ready; Drifting is read without a lock by every decision.
type TTFT struct {
	drifting atomic.Bool

	mu   sync.Mutex
	errs [TTFTWindow]float64
	at   int
	n    int
	sum  float64
}

// Observe adds one first token's predicted and observed TTFT and returns
// the window's mean error and whether the drift state changed.
func (t *TTFT) Observe(predicted, observed time.Duration) (errMean float64, raised, cleared bool) {
	e := math.Abs(observed.Seconds()-predicted.Seconds()) / max(observed.Seconds(), predicted.Seconds(), 1e-6)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == TTFTWindow {
		t.sum -= t.errs[t.at]
	} else {
		t.n++
	}
	t.errs[t.at] = e
	t.at = (t.at + 1) % TTFTWindow
	t.sum += e
	errMean = t.sum / float64(t.n)
	switch d := t.drifting.Load(); {
	case !d && t.n >= TTFTMinimum && errMean > TTFTRaise:
		t.drifting.Store(true)
		raised = true
	case d && errMean < TTFTClear:
		t.drifting.Store(false)
		cleared = true
	}
	return errMean, raised, cleared
}

// Drifting reports whether the worker is in ttft_model_drift.
func (t *TTFT) Drifting() bool { return t.drifting.Load() }

// Forget ends the drift state (the worker left) and reports whether it
// was drifting.
func (t *TTFT) Forget() bool { return t.drifting.CompareAndSwap(true, false) }

// MeanError is the window's mean error (0 before any first token).
func (t *TTFT) MeanError() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		return 0
	}
	return t.sum / float64(t.n)
}
