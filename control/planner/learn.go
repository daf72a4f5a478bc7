package planner

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/tandemllm/tandem/engine"
)

// LearnConfig configures a ProfileLearner.
type LearnConfig struct {
	// Base gives the grid (its axes and limits) and every value the
	// learner has too few observations for. Required, and valid.
	Base *Profile
	// TimeScale multiplies every observed duration (a mocker at
	// --speedup S reports wall time 1/S of its model time: give S).
	// Zero means 1.
	TimeScale float64
	// MinSamples is the number of observations a cell needs before its
	// learned value replaces the base's (default 3).
	MinSamples int
	// Tolerance is how far, relatively, an observation's token count,
	// concurrency or context may be from a grid point and still count for
	// it (default 0.1, i.e. ±10%); CachedFractionTolerance is the absolute
	// tolerance on the cached fraction (default 0.05).
	Tolerance, CachedFractionTolerance float64
}

// cellWindow is how many recent observations a cell keeps: its value is
// their median, so a few outliers or a slow drift cost nothing.
const cellWindow = 31

// outlierFactor: once a cell has MinSamples observations, one more than
// this factor away from its median (either way) is dropped as an outlier
// (a step stalled by a GC pause, a preemption storm).
const outlierFactor = 4

type cell struct {
	n    uint64 // observations accepted
	ring []float64
}

func (c *cell) add(v float64) {
	if len(c.ring) < cellWindow {
		c.ring = append(c.ring, v)
	} else {
		c.ring[c.n%cellWindow] = v
	}
	c.n++
}

func (c *cell) median() float64 {
	s := slices.Clone(c.ring)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// LearnStats counts what a ProfileLearner did with its observations.
type LearnStats struct {
	Steps    uint64 // observed
	Prefill  uint64 // accepted into a prefill cell
	Decode   uint64 // accepted into a decode cell
	Mixed    uint64 // not a profile point by itself: prefill beside decodes, several prefills, nothing
	OffGrid  uint64 // no grid point within tolerance
	Outliers uint64 // dropped as outliers or out of range
	// PrefillCells and DecodeCells are the cells with at least MinSamples.
	PrefillCells, DecodeCells int
}

// ProfileLearner accumulates engine steps (engine.StepObserver) into the
// cells of a profile's grids and produces a Profile from them. Only steps
// that are a profile point by themselves count:
//
//   - a step prefilling exactly one sequence and decoding none is the TTFT
//     of a lone prompt of PrefillTokens+PrefillCachedTokens tokens with
//     cached fraction PrefillCachedTokens/(that), when the prompt fits one
//     step (a prompt longer than the step budget takes several steps:
//     those cells keep the base's values);
//   - a step decoding D sequences and prefilling none is the ITL of D
//     sequences at their mean context.
//
// Each is filed under the nearest grid point within the tolerance; others
// are counted and dropped. Memory is bounded by the grid: each cell keeps
// at most 31 recent values. Safe for concurrent use (one learner may
// observe every worker of a pool).
type ProfileLearner struct {
	cfg     LearnConfig
	mu      sync.Mutex
	prefill [][]cell // [isl][cf]
	decode  [][]cell // [conc][ctx]
	stats   LearnStats
}

// NewProfileLearner checks cfg and returns an empty learner.
func NewProfileLearner(cfg LearnConfig) (*ProfileLearner, error) {
	if cfg.Base == nil {
		return nil, errors.New("planner: learner needs a base profile")
	}
	if err := cfg.Base.Validate(); err != nil {
		return nil, fmt.Errorf("planner: learner base: %w", err)
	}
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 1
	}
	if cfg.MinSamples == 0 {
		cfg.MinSamples = 3
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = 0.1
	}
	if cfg.CachedFractionTolerance == 0 {
		cfg.CachedFractionTolerance = 0.05
	}
	switch {
	case !finitePos(cfg.TimeScale) || cfg.TimeScale > 1e6:
		return nil, fmt.Errorf("planner: learner time scale %v must be in (0, 1e6]", cfg.TimeScale)
	case cfg.MinSamples < 1 || cfg.MinSamples > cellWindow:
		return nil, fmt.Errorf("planner: learner min samples %d must be in [1, %d]", cfg.MinSamples, cellWindow)
	case !finitePos(cfg.Tolerance) || cfg.Tolerance > 1:
		return nil, fmt.Errorf("planner: learner tolerance %v must be in (0, 1]", cfg.Tolerance)
	case !finitePos(cfg.CachedFractionTolerance) || cfg.CachedFractionTolerance > 0.5:
		return nil, fmt.Errorf("planner: learner cached-fraction tolerance %v must be in (0, 0.5]", cfg.CachedFractionTolerance)
	}
	b := cfg.Base
	l := &ProfileLearner{cfg: cfg}
	l.prefill = make([][]cell, len(b.Prefill.ISL))
	for i := range l.prefill {
		l.prefill[i] = make([]cell, len(b.Prefill.CachedFraction))
	}
	l.decode = make([][]cell, len(b.Decode.Concurrency))
	for i := range l.decode {
		l.decode[i] = make([]cell, len(b.Decode.Context))
	}
	return l, nil
}

// nearest is the index of the point of axis a nearest x (a is increasing),
// or -1 if it is farther than tol: relative when rel, absolute otherwise.
func nearest(a []float64, x, tol float64, rel bool) int {
	i, _ := slices.BinarySearch(a, x)
	best, dist := -1, math.Inf(1)
	for _, k := range [2]int{i - 1, i} {
		if k < 0 || k >= len(a) {
			continue
		}
		d := math.Abs(x - a[k])
		if rel {
			d /= a[k]
		}
		if d < dist {
			best, dist = k, d
		}
	}
	if dist > tol {
		return -1
	}
	return best
}

// ObserveStep implements engine.StepObserver.
func (l *ProfileLearner) ObserveStep(st engine.StepStats) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stats.Steps++
	ms := float64(st.Duration) / 1e6 * l.cfg.TimeScale
	switch {
	case st.PrefillTokens < 0 || st.PrefillCachedTokens < 0 || st.PrefillSeqs < 0 ||
		st.DecodeSeqs < 0 || st.DecodeContextTokens < 0 ||
		st.PrefillTokens > maxProfileTokens || st.PrefillCachedTokens > maxProfileTokens ||
		st.DecodeSeqs > maxProfileConcurrency || st.DecodeContextTokens > 1<<40 ||
		!finitePos(ms) || ms > maxProfileMs:
		l.stats.Outliers++
	case st.PrefillSeqs == 1 && st.PrefillTokens > 0 && st.DecodeSeqs == 0:
		isl := float64(st.PrefillTokens + st.PrefillCachedTokens)
		i := nearest(l.cfg.Base.Prefill.ISL, isl, l.cfg.Tolerance, true)
		j := nearest(l.cfg.Base.Prefill.CachedFraction, float64(st.PrefillCachedTokens)/isl, l.cfg.CachedFractionTolerance, false)
		if i < 0 || j < 0 {
			l.stats.OffGrid++
			return
		}
		if l.accept(&l.prefill[i][j], ms) {
			l.stats.Prefill++
		}
	case st.PrefillSeqs == 0 && st.DecodeSeqs > 0:
		ctx := float64(st.DecodeContextTokens) / float64(st.DecodeSeqs)
		i := nearest(l.cfg.Base.Decode.Concurrency, float64(st.DecodeSeqs), l.cfg.Tolerance, true)
		j := nearest(l.cfg.Base.Decode.Context, ctx, l.cfg.Tolerance, true)
		if i < 0 || j < 0 {
			l.stats.OffGrid++
			return
		}
		if l.accept(&l.decode[i][j], ms) {
			l.stats.Decode++
		}
	default:
		l.stats.Mixed++
	}
}

func (l *ProfileLearner) accept(c *cell, ms float64) bool {
	if len(c.ring) >= l.cfg.MinSamples {
		if m := c.median(); ms > m*outlierFactor || ms < m/outlierFactor {
			l.stats.Outliers++
			return false
		}
	}
	c.add(ms)
	return true
}

// Stats returns the learner's counters.
func (l *ProfileLearner) Stats() LearnStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	count := func(g [][]cell) int {
		n := 0
		for _, r := range g {
			for k := range r {
				if len(r[k].ring) >= l.cfg.MinSamples {
					n++
				}
			}
		}
		return n
	}
	s.PrefillCells, s.DecodeCells = count(l.prefill), count(l.decode)
	return s
}

// Profile is the base profile with every cell that has at least
// MinSamples observations replaced by their median; it passes Validate.
func (l *ProfileLearner) Profile() (*Profile, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.cfg.Base
	p := *b
	if p.Worker != "" {
		p.Worker += "; "
	}
	p.Worker += "learned from step timings"
	fill := func(base [][]float64, cells [][]cell) [][]float64 {
		out := make([][]float64, len(base))
		for i, r := range base {
			out[i] = slices.Clone(r)
			for j := range r {
				if c := &cells[i][j]; len(c.ring) >= l.cfg.MinSamples {
					out[i][j] = min(max(c.median(), 1e-3), maxProfileMs)
				}
			}
		}
		return out
	}
	p.Prefill.ISL = slices.Clone(b.Prefill.ISL)
	p.Prefill.CachedFraction = slices.Clone(b.Prefill.CachedFraction)
	p.Prefill.TTFTMs = fill(b.Prefill.TTFTMs, l.prefill)
	p.Decode.Concurrency = slices.Clone(b.Decode.Concurrency)
	p.Decode.Context = slices.Clone(b.Decode.Context)
	p.Decode.ITLMs = fill(b.Decode.ITLMs, l.decode)
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("planner: learned profile: %w", err)
	}
	return &p, nil
}

// LearnedCells reports, per grid, which cells hold a learned value.
func (l *ProfileLearner) LearnedCells() (prefill, decode [][]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	mark := func(cells [][]cell) [][]bool {
		out := make([][]bool, len(cells))
		for i, r := range cells {
			out[i] = make([]bool, len(r))
			for j := range r {
				out[i][j] = len(r[j].ring) >= l.cfg.MinSamples
			}
		}
		return out
	}
	return mark(l.prefill), mark(l.decode)
}
