package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/tandemllm/tandem/control/planner"
)

// ProfileSpec is a `tandem bench profile` sweep of one worker behind an
// OpenAI-compatible endpoint (a frontend in front of exactly one worker,
// or an engine's own server): prefill time against input length and
// cached fraction, and inter-token latency against concurrency and
// context length. The result is the planner's profile (planner.Profile).
type ProfileSpec struct {
	Target Target
	// ISL and CachedFraction are the prefill grid's axes; Concurrency and
	// Context the decode grid's.
	ISL            []int
	CachedFraction []float64
	Concurrency    []int
	Context        []int
	// Repeats is how many fresh prompts each prefill point is measured
	// with (the median is kept); default 3.
	Repeats int
	// DecodeTokens is the output length of each decode measurement's
	// sequences (default 64); it is raised so the all-decoding window
	// outlasts the batch's own prefill.
	DecodeTokens int
	// BlockSize aligns a cached prefix down to whole KV blocks, as prefix
	// caches hit (default 16).
	BlockSize int
	// The worker's limits, written into the profile: decode points that
	// do not fit KVCapacityTokens (with their output) or exceed
	// MaxNumSeqs are not measured and recorded as 0 ("does not fit").
	KVCapacityTokens, MaxNumSeqs, MaxNumBatchedTokens int
	// TimeScale multiplies every measured time: a mocker run with
	// --speedup S is profiled with TimeScale S to get its model times.
	TimeScale float64
	// Timeout bounds each request (default 5 minutes).
	Timeout time.Duration
	Seed    uint64
	// Worker describes what was measured (written into the profile).
	Worker string
	// Log, if set, gets one line per measured point.
	Log io.Writer
}

// Bounds of a sweep: each keeps a typo from sending a request the worker
// cannot take or a sweep that runs for days.
const (
	maxProfileISL         = 1 << 21
	maxProfileConcurrency = 4096
	maxProfileRepeats     = 100
	maxProfileDecode      = 1 << 16
)

func (s *ProfileSpec) defaults() error {
	if s.Repeats == 0 {
		s.Repeats = 3
	}
	if s.DecodeTokens == 0 {
		s.DecodeTokens = 64
	}
	if s.BlockSize == 0 {
		s.BlockSize = 16
	}
	if s.TimeScale == 0 {
		s.TimeScale = 1
	}
	if s.Timeout == 0 {
		s.Timeout = 5 * time.Minute
	}
	incInts := func(name string, a []int, lo, hi int) error {
		if len(a) == 0 || len(a) > 256 {
			return fmt.Errorf("profile: --%s: %d values (want 1..256)", name, len(a))
		}
		for i, v := range a {
			if v < lo || v > hi || (i > 0 && v <= a[i-1]) {
				return fmt.Errorf("profile: --%s: %d: values must be in [%d, %d] and increasing", name, v, lo, hi)
			}
		}
		return nil
	}
	switch {
	case s.Repeats < 1 || s.Repeats > maxProfileRepeats:
		return fmt.Errorf("profile: --repeats %d out of range [1, %d]", s.Repeats, maxProfileRepeats)
	case s.DecodeTokens < 2 || s.DecodeTokens > maxProfileDecode:
		return fmt.Errorf("profile: --decode-tokens %d out of range [2, %d]", s.DecodeTokens, maxProfileDecode)
	case s.BlockSize < 1 || s.BlockSize > 1<<16:
		return fmt.Errorf("profile: --block-size %d out of range [1, 65536]", s.BlockSize)
	case !(s.TimeScale > 0) || s.TimeScale > 1e6:
		return fmt.Errorf("profile: --time-scale %v out of range (0, 1e6]", s.TimeScale)
	case s.KVCapacityTokens < 1 || s.KVCapacityTokens > 1<<40:
		return fmt.Errorf("profile: --kv-capacity-tokens %d out of range: give the worker's KV cache size", s.KVCapacityTokens)
	case s.MaxNumSeqs < 0 || s.MaxNumSeqs > 1<<20 || s.MaxNumBatchedTokens < 0 || s.MaxNumBatchedTokens > 1<<30:
		return errors.New("profile: --max-num-seqs or --max-num-batched-tokens out of range")
	case s.Timeout < 0:
		return errors.New("profile: timeout must not be negative")
	}
	if err := incInts("isl", s.ISL, 1, maxProfileISL); err != nil {
		return err
	}
	if err := incInts("concurrency", s.Concurrency, 1, maxProfileConcurrency); err != nil {
		return err
	}
	if err := incInts("context", s.Context, 1, maxProfileISL); err != nil {
		return err
	}
	if len(s.CachedFraction) == 0 || len(s.CachedFraction) > 256 {
		return fmt.Errorf("profile: --cached-fraction: %d values (want 1..256)", len(s.CachedFraction))
	}
	for i, f := range s.CachedFraction {
		if !(f >= 0 && f < 1) || (i > 0 && f <= s.CachedFraction[i-1]) {
			return fmt.Errorf("profile: --cached-fraction %v: values must be in [0, 1) and increasing", f)
		}
	}
	return nil
}

// profiler holds a sweep's client and prompt generator.
type profiler struct {
	spec ProfileSpec
	c    *client
	ep   *endpoint
	rng  *rng
	v    VocabRange
}

// prompt draws a fresh random prompt: token ids from the default vocab
// range, so no two prompts share a block.
func (p *profiler) prompt(n int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(p.v.Lo + p.rng.intn(p.v.Hi-p.v.Lo))
	}
	return ids
}

func (p *profiler) send(ctx context.Context, ids []int32, maxTokens int) (Record, time.Time, error) {
	req := &Request{Endpoint: Completions, PromptIDs: ids, MaxTokens: maxTokens, IgnoreEOS: true, InputTokens: len(ids)}
	sent := time.Now()
	rec, _, _ := p.c.do(ctx, p.ep, req, sent, sent)
	if rec.Error != "" {
		return rec, sent, fmt.Errorf("profile: request of %d tokens: %s", len(ids), rec.Error)
	}
	if rec.TTFTMs < 0 {
		return rec, sent, fmt.Errorf("profile: request of %d tokens: no first token", len(ids))
	}
	return rec, sent, nil
}

func (p *profiler) logf(format string, args ...any) {
	if p.spec.Log != nil {
		fmt.Fprintf(p.spec.Log, format+"\n", args...)
	}
}

// Profile runs the sweep and returns the profile. Each prefill point
// sends, per repeat, a fresh prompt's cached part first (one output
// token) and then the whole prompt, whose TTFT is the point's; requests
// go one at a time, so nothing queues or decodes beside the prefill. Each
// decode point starts its sequences at once and measures the mean gap
// between tokens inside the window where every sequence is decoding (after
// the last first token, before the first last token), which leaves the
// batch's own prefills out.
func Profile(ctx context.Context, spec ProfileSpec) (*planner.Profile, error) {
	if err := spec.defaults(); err != nil {
		return nil, err
	}
	conc := spec.Concurrency[len(spec.Concurrency)-1]
	p := &profiler{spec: spec, c: &client{http: NewHTTPClient(conc), stream: true, timeout: spec.Timeout},
		rng: newRNG(spec.Seed, 0x70f11e), v: VocabRange{}.orDefault()}
	base, err := baseURL(spec.Target.URL)
	if err != nil {
		return nil, err
	}
	p.ep = &endpoint{Target: spec.Target, base: base}
	if p.ep.Model == "" {
		if p.ep.Model, err = discoverModel(ctx, p.c.http, base, spec.Target.APIKey); err != nil {
			return nil, err
		}
	}
	out := &planner.Profile{Version: planner.ProfileVersion, Model: p.ep.Model, Worker: spec.Worker,
		KVCapacityTokens: spec.KVCapacityTokens, MaxNumSeqs: spec.MaxNumSeqs, MaxNumBatchedTokens: spec.MaxNumBatchedTokens}
	// One unmeasured request first: connection set-up and any lazy
	// initialisation stay out of the first point.
	if _, _, err := p.send(ctx, p.prompt(min(spec.ISL[0], 64)), 2); err != nil {
		return nil, err
	}
	for _, isl := range spec.ISL {
		row := make([]float64, len(spec.CachedFraction))
		for j, cf := range spec.CachedFraction {
			ms, err := p.prefillPoint(ctx, isl, cf)
			if err != nil {
				return nil, err
			}
			row[j] = ms
			p.logf("prefill isl=%d cached=%.2f: ttft %.1f ms", isl, cf, ms)
		}
		out.Prefill.ISL = append(out.Prefill.ISL, float64(isl))
		out.Prefill.TTFTMs = append(out.Prefill.TTFTMs, row)
	}
	out.Prefill.CachedFraction = slices.Clone(spec.CachedFraction)
	for _, c := range spec.Concurrency {
		row := make([]float64, len(spec.Context))
		for j, x := range spec.Context {
			d := p.decodeTokens(c, x)
			if (spec.MaxNumSeqs > 0 && c > spec.MaxNumSeqs) || c*(x+d) > spec.KVCapacityTokens {
				p.logf("decode concurrency=%d context=%d: does not fit", c, x)
				continue
			}
			ms, err := p.decodePoint(ctx, c, x, d)
			if err != nil {
				return nil, err
			}
			row[j] = ms
			p.logf("decode concurrency=%d context=%d: itl %.2f ms", c, x, ms)
		}
		out.Decode.Concurrency = append(out.Decode.Concurrency, float64(c))
		out.Decode.ITLMs = append(out.Decode.ITLMs, row)
	}
	for _, x := range spec.Context {
		out.Decode.Context = append(out.Decode.Context, float64(x))
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("profile: the measured profile is not valid (%w); widen the grid", err)
	}
	return out, nil
}

func (p *profiler) prefillPoint(ctx context.Context, isl int, cf float64) (float64, error) {
	var ttfts []float64
	cached := int(cf*float64(isl)) / p.spec.BlockSize * p.spec.BlockSize
	for range p.spec.Repeats {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		ids := p.prompt(isl)
		if cached > 0 {
			if _, _, err := p.send(ctx, ids[:cached], 1); err != nil {
				return 0, err
			}
		}
		rec, _, err := p.send(ctx, ids, 1)
		if err != nil {
			return 0, err
		}
		ttfts = append(ttfts, rec.TTFTMs*p.spec.TimeScale)
	}
	slices.Sort(ttfts)
	return ttfts[len(ttfts)/2], nil
}

// decodeTokens is the output length of a decode point: enough that the
// window where all c sequences decode outlasts the steps their c·x prompt
// tokens take to prefill (one budget of tokens per step).
func (p *profiler) decodeTokens(c, x int) int {
	budget := p.spec.MaxNumBatchedTokens
	if budget <= 0 {
		budget = 8192
	}
	steps := (c*x + budget - 1) / budget
	return min(max(p.spec.DecodeTokens, 2*steps+16), maxProfileDecode)
}

func (p *profiler) decodePoint(ctx context.Context, c, x, d int) (float64, error) {
	type stream struct {
		times []time.Time // of every content chunk
		err   error
	}
	ss := make([]stream, c)
	prompts := make([][]int32, c)
	for i := range prompts {
		prompts[i] = p.prompt(x)
	}
	var wg sync.WaitGroup
	for i := range c {
		wg.Go(func() {
			rec, sent, err := p.send(ctx, prompts[i], d)
			if err != nil {
				ss[i].err = err
				return
			}
			at := sent.Add(time.Duration(rec.TTFTMs * float64(time.Millisecond)))
			ts := []time.Time{at}
			for _, g := range rec.ITLMs {
				at = at.Add(time.Duration(g * float64(time.Millisecond)))
				ts = append(ts, at)
			}
			ss[i].times = ts
		})
	}
	wg.Wait()
	var lo, hi time.Time
	for i, s := range ss {
		if s.err != nil {
			return 0, s.err
		}
		if len(s.times) < 2 {
			return 0, fmt.Errorf("profile: decode concurrency=%d context=%d: a stream had %d tokens", c, x, len(s.times))
		}
		if first := s.times[0]; i == 0 || first.After(lo) {
			lo = first
		}
		if last := s.times[len(s.times)-1]; i == 0 || last.Before(hi) {
			hi = last
		}
	}
	sum, n := 0.0, 0
	for _, s := range ss {
		for k := 1; k < len(s.times); k++ {
			if !s.times[k-1].Before(lo) && !s.times[k].After(hi) {
				sum += s.times[k].Sub(s.times[k-1]).Seconds() * 1000
				n++
			}
		}
	}
	if n == 0 {
		// No window where all decode at once (a worker that batches
		// fewer than c): every gap, as the best available figure.
		for _, s := range ss {
			for k := 1; k < len(s.times); k++ {
				sum += s.times[k].Sub(s.times[k-1]).Seconds() * 1000
				n++
			}
		}
	}
	ms := sum / float64(n) * p.spec.TimeScale
	if math.IsNaN(ms) || ms <= 0 {
		return 0, fmt.Errorf("profile: decode concurrency=%d context=%d: no usable token gaps", c, x)
	}
	return ms, nil
}
