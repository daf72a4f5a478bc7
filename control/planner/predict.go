package planner

import (
	"fmt"
	"math"
	"strings"
)

// Predictor forecasts one load series (requests per second, mean input
// length, ...) from its past values, one per planner interval.
type Predictor interface {
	// Observe appends the latest interval's value. NaN and ±Inf are
	// ignored (an interval without requests has no mean length).
	Observe(v float64)
	// Predict forecasts the value h ≥ 1 intervals after the last one
	// observed; it returns NaN before the first observation.
	Predict(h int) float64
}

// NewPredictor builds a predictor by name: "constant", "moving-average"
// (window), or "holt" (Holt's linear trend with alpha, beta).
func NewPredictor(name string, window int, alpha, beta float64) (Predictor, error) {
	switch strings.ToLower(name) {
	case "constant":
		return &Constant{last: math.NaN()}, nil
	case "moving-average", "ma":
		if window < 1 || window > 1<<16 {
			return nil, fmt.Errorf("planner: moving-average window %d out of 1..65536", window)
		}
		return &MovingAverage{Window: window}, nil
	case "holt":
		if !(alpha > 0 && alpha <= 1 && beta > 0 && beta <= 1) {
			return nil, fmt.Errorf("planner: holt alpha %v and beta %v must be in (0, 1]", alpha, beta)
		}
		return &Holt{Alpha: alpha, Beta: beta}, nil
	}
	return nil, fmt.Errorf("planner: unknown predictor %q (constant, moving-average, holt)", name)
}

func usable(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Constant predicts the last value: Dynamo's `constant` predictor.
type Constant struct{ last float64 }

// Observe implements Predictor.
func (c *Constant) Observe(v float64) {
	if usable(v) {
		c.last = v
	}
}

// Predict implements Predictor.
func (c *Constant) Predict(int) float64 { return c.last }

// MovingAverage predicts the mean of the last Window values.
type MovingAverage struct {
	Window int
	vals   []float64
	sum    float64
}

// Observe implements Predictor.
func (m *MovingAverage) Observe(v float64) {
	if !usable(v) {
		return
	}
	m.vals = append(m.vals, v)
	m.sum += v
	if len(m.vals) > m.Window {
		m.sum -= m.vals[0]
		m.vals = m.vals[1:]
	}
}

// Predict implements Predictor.
func (m *MovingAverage) Predict(int) float64 {
	if len(m.vals) == 0 {
		return math.NaN()
	}
	// Recomputed rather than kept as a running sum alone, so rounding
	// never drifts over a long run.
	s := 0.0
	for _, v := range m.vals {
		s += v
	}
	m.sum = s
	return s / float64(len(m.vals))
}

// Holt is Holt's linear (double exponential) smoothing: a level and a
// trend, each smoothed; the forecast h steps ahead is level + h·trend.
// It follows a ramp without the lag of a mean, which is what lets a
// planner have workers ready when the ramp arrives. Dynamo's `kalman`
// predictor (a local linear trend) tracks the same model.
type Holt struct {
	Alpha, Beta  float64
	n            int
	level, trend float64
}

// Observe implements Predictor.
func (h *Holt) Observe(v float64) {
	if !usable(v) {
		return
	}
	switch h.n {
	case 0:
		h.level = v
	case 1:
		h.trend = v - h.level
		h.level = v
	default:
		prev := h.level
		h.level = h.Alpha*v + (1-h.Alpha)*(h.level+h.trend)
		h.trend = h.Beta*(h.level-prev) + (1-h.Beta)*h.trend
	}
	h.n++
}

// Predict implements Predictor. Loads are never negative, so neither is
// the forecast.
func (h *Holt) Predict(k int) float64 {
	if h.n == 0 {
		return math.NaN()
	}
	return max(h.level+float64(max(k, 1))*h.trend, 0)
}
