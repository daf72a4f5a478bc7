package planner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
)

// ProfileVersion is the version of the profile's JSON format.
const ProfileVersion = 1

// maxProfileBytes bounds a profile file read from disk.
const maxProfileBytes = 4 << 20

// maxGrid bounds each axis of a profile grid.
const maxGrid = 256

// Upper bounds of a profile's values: far beyond any real worker, low
// enough that interpolation and extrapolation stay finite.
const (
	maxProfileTokens      = 1 << 24 // ISL and context axes
	maxProfileConcurrency = 1 << 20
	maxProfileMs          = 1e7 // one step or prefill: under three hours
)

// Profile is the measured performance of one worker type: its prefill time
// against input length and cached fraction (in isolation: no queue, no
// decodes beside it), and its inter-token latency against concurrency and
// context length (decodes only). `tandem bench profile` writes it; the
// planner interpolates it bilinearly.
type Profile struct {
	Version int    `json:"version"`
	Model   string `json:"model,omitempty"`
	// Worker describes what was measured (engine, timing, flags).
	Worker string `json:"worker,omitempty"`
	// KVCapacityTokens is the worker's KV cache size; decodes whose
	// contexts exceed it cannot run at once.
	KVCapacityTokens int `json:"kv_capacity_tokens"`
	// MaxNumSeqs caps the concurrency of one worker.
	MaxNumSeqs int `json:"max_num_seqs,omitempty"`
	// MaxNumBatchedTokens is the per-step token budget (chunked prefill).
	MaxNumBatchedTokens int `json:"max_num_batched_tokens,omitempty"`

	Prefill PrefillGrid `json:"prefill"`
	Decode  DecodeGrid  `json:"decode"`
}

// PrefillGrid holds TTFTMs[i][j]: the time to first token of a lone
// request of ISL[i] tokens of which CachedFraction[j] hit the prefix cache.
type PrefillGrid struct {
	ISL            []float64   `json:"isl"`
	CachedFraction []float64   `json:"cached_fraction"`
	TTFTMs         [][]float64 `json:"ttft_ms"`
}

// DecodeGrid holds ITLMs[i][j]: the mean inter-token latency with
// Concurrency[i] sequences decoding at Context[j] tokens each. Zero marks a
// point that does not fit the KV cache.
type DecodeGrid struct {
	Concurrency []float64   `json:"concurrency"`
	Context     []float64   `json:"context"`
	ITLMs       [][]float64 `json:"itl_ms"`
}

// LoadProfile reads and validates a profile file.
func LoadProfile(path string) (*Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("planner: profile: %w", err)
	}
	defer f.Close()
	return ReadProfile(f)
}

// ReadProfile decodes and validates a profile, reading at most 4 MiB.
func ReadProfile(r io.Reader) (*Profile, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxProfileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("planner: profile: %w", err)
	}
	if len(b) > maxProfileBytes {
		return nil, fmt.Errorf("planner: profile larger than %d bytes", maxProfileBytes)
	}
	var p Profile
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("planner: profile: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// WriteFile writes the profile as indented JSON.
func (p *Profile) WriteFile(path string) error {
	if err := p.Validate(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("planner: profile: %w", err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func finitePos(v float64) bool { return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

func checkAxis(name string, a []float64, lo, hi float64) error {
	if len(a) == 0 || len(a) > maxGrid {
		return fmt.Errorf("planner: profile %s: %d points (want 1..%d)", name, len(a), maxGrid)
	}
	for i, v := range a {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < lo || v > hi || (i > 0 && v <= a[i-1]) {
			return fmt.Errorf("planner: profile %s[%d]=%v: values must be finite, in [%v, %v] and increasing", name, i, v, lo, hi)
		}
	}
	return nil
}

func checkTable(name string, t [][]float64, rows, cols int, zeroOK bool) error {
	if len(t) != rows {
		return fmt.Errorf("planner: profile %s: %d rows, want %d", name, len(t), rows)
	}
	for i, r := range t {
		if len(r) != cols {
			return fmt.Errorf("planner: profile %s[%d]: %d columns, want %d", name, i, len(r), cols)
		}
		for j, v := range r {
			if !((finitePos(v) && v <= maxProfileMs) || (zeroOK && v == 0)) {
				return fmt.Errorf("planner: profile %s[%d][%d]=%v: want a positive time of at most %v ms", name, i, j, v, maxProfileMs)
			}
		}
	}
	return nil
}

// Validate checks every axis and table: finite, increasing axes within
// bounds, positive times, and at least one decode point that fits.
func (p *Profile) Validate() error {
	switch {
	case p.Version != ProfileVersion:
		return fmt.Errorf("planner: profile version %d, want %d", p.Version, ProfileVersion)
	case p.KVCapacityTokens < 1 || p.KVCapacityTokens > 1<<40:
		return fmt.Errorf("planner: profile kv_capacity_tokens %d out of range", p.KVCapacityTokens)
	case p.MaxNumSeqs < 0 || p.MaxNumSeqs > 1<<20 || p.MaxNumBatchedTokens < 0 || p.MaxNumBatchedTokens > 1<<30:
		return errors.New("planner: profile max_num_seqs or max_num_batched_tokens out of range")
	}
	pg, dg := p.Prefill, p.Decode
	if err := checkAxis("prefill.isl", pg.ISL, 1, maxProfileTokens); err != nil {
		return err
	}
	if err := checkAxis("prefill.cached_fraction", pg.CachedFraction, 0, 1); err != nil {
		return err
	}
	if err := checkTable("prefill.ttft_ms", pg.TTFTMs, len(pg.ISL), len(pg.CachedFraction), false); err != nil {
		return err
	}
	if err := checkAxis("decode.concurrency", dg.Concurrency, 1, maxProfileConcurrency); err != nil {
		return err
	}
	if err := checkAxis("decode.context", dg.Context, 1, maxProfileTokens); err != nil {
		return err
	}
	if err := checkTable("decode.itl_ms", dg.ITLMs, len(dg.Concurrency), len(dg.Context), true); err != nil {
		return err
	}
	if !slices.ContainsFunc(dg.ITLMs, func(r []float64) bool { return slices.ContainsFunc(r, finitePos) }) {
		return errors.New("planner: profile decode.itl_ms has no point that fits")
	}
	return nil
}

// bracket returns i and the weight w of a[i+1] for x on axis a, clamping
// outside the axis (a profile is not extrapolated: beyond its last point
// the last value holds, scaled by the callers where that is known).
func bracket(a []float64, x float64) (int, float64) {
	if len(a) == 1 || x <= a[0] {
		return 0, 0
	}
	n := len(a)
	if x >= a[n-1] {
		return n - 2, 1
	}
	i, _ := slices.BinarySearch(a, x)
	i-- // a[i] < x ≤ a[i+1]
	return i, (x - a[i]) / (a[i+1] - a[i])
}

func lerp(a, b, w float64) float64 { return a + (b-a)*w }

// PrefillMs is the isolated prefill time of a prompt of isl tokens with
// cached fraction cf. Beyond the longest measured prompt it extrapolates
// linearly in the uncached tokens from the last two points, since a
// longer prompt is never cheaper.
func (p *Profile) PrefillMs(isl, cf float64) float64 {
	g := p.Prefill
	if isl <= 0 {
		return 0
	}
	cf = min(max(cf, 0), 1)
	at := func(i int) float64 {
		j, w := bracket(g.CachedFraction, cf)
		if len(g.CachedFraction) == 1 {
			return g.TTFTMs[i][0]
		}
		return lerp(g.TTFTMs[i][j], g.TTFTMs[i][j+1], w)
	}
	n := len(g.ISL)
	if n == 1 {
		return at(0) * isl / g.ISL[0]
	}
	if isl > g.ISL[n-1] {
		a, b := at(n-2), at(n-1)
		slope := (b - a) / (g.ISL[n-1] - g.ISL[n-2])
		return b + max(slope, 0)*(isl-g.ISL[n-1])
	}
	i, w := bracket(g.ISL, isl)
	return lerp(at(i), at(i+1), w)
}

// ITLMs is the inter-token latency of conc decodes at context ctx, or +Inf
// where the profile says they do not fit. Beyond the grid the nearest edge
// holds, except that a point whose total context exceeds the KV capacity is
// +Inf.
func (p *Profile) ITLMs(conc, ctx float64) float64 {
	if conc*ctx > float64(p.KVCapacityTokens) || (p.MaxNumSeqs > 0 && conc > float64(p.MaxNumSeqs)) {
		return math.Inf(1)
	}
	g := p.Decode
	i, wi := bracket(g.Concurrency, conc)
	j, wj := bracket(g.Context, ctx)
	v := func(a, b int) float64 {
		a, b = min(a, len(g.Concurrency)-1), min(b, len(g.Context)-1)
		if t := g.ITLMs[a][b]; t > 0 {
			return t
		}
		return math.Inf(1)
	}
	if len(g.Concurrency) == 1 {
		wi = 0
	}
	if len(g.Context) == 1 {
		wj = 0
	}
	// Only the corners with weight contribute, so a missing (does not
	// fit) corner at zero weight does not poison its neighbours.
	sum := 0.0
	for _, c := range [4]struct {
		a, b int
		w    float64
	}{{i, j, (1 - wi) * (1 - wj)}, {i + 1, j, wi * (1 - wj)}, {i, j + 1, (1 - wi) * wj}, {i + 1, j + 1, wi * wj}} {
		if c.w == 0 {
			continue
		}
		sum += c.w * v(c.a, c.b)
	}
	return sum
}

// MaxConcurrency is the largest per-worker concurrency (fractional,
// found by bisection on the interpolated grid) whose ITL at context ctx is
// at most itlMs; 0 if even one sequence misses it.
func (p *Profile) MaxConcurrency(itlMs, ctx float64) float64 {
	if !(p.ITLMs(1, ctx) <= itlMs) {
		return 0
	}
	hi := float64(p.KVCapacityTokens) / max(ctx, 1)
	if p.MaxNumSeqs > 0 {
		hi = min(hi, float64(p.MaxNumSeqs))
	}
	if p.ITLMs(hi, ctx) <= itlMs {
		return hi
	}
	lo := 1.0
	for range 60 {
		mid := (lo + hi) / 2
		if p.ITLMs(mid, ctx) <= itlMs {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
