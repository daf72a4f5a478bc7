package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// What a sweep changes from one point to the next.
const (
	SweepConcurrency = "concurrency"  // closed loop, sessions in flight
	SweepRate        = "rate"         // open loop, Poisson arrivals per second
	SweepPrefix      = "prefix-ratio" // share of every prompt that is one common prefix (0 to 1)
	SweepInput       = "input"        // the prompt-length distribution (uniform, zipf, lognormal, ...)
)

// Sweep is a series of runs that differ in one load variable.
type Sweep struct {
	Var    string
	Values []string
	// Saturate (rate only) starts at Values[0] and doubles the rate until
	// the server saturates: it completes less than SatThroughput of the
	// offered rate, or (with an SLO) fewer than SatAttainment of the
	// requests meet it, or MaxPoints points have run.
	Saturate      bool
	MaxPoints     int
	SatThroughput float64
	SatAttainment float64
	SLO           SLO
}

// ParseSweep reads "concurrency=1,2,4,8", "rate=1,2,4", "rate=saturate"
// (from 1 req/s), "rate=saturate:0.5" (from 0.5), "prefix-ratio=0,0.5,1"
// or "input=uniform:512,1536;zipf:1.2,64,2048" (distributions hold commas,
// so they are separated by semicolons).
func ParseSweep(spec string) (Sweep, error) {
	k, v, ok := strings.Cut(strings.TrimSpace(spec), "=")
	if !ok || strings.TrimSpace(v) == "" {
		return Sweep{}, fmt.Errorf("--sweep %q: want VARIABLE=VALUES (concurrency, rate, prefix-ratio or input)", spec)
	}
	sw := Sweep{Var: strings.TrimSpace(k), MaxPoints: 12, SatThroughput: 0.9, SatAttainment: 0.9}
	sep := ","
	if sw.Var == SweepInput {
		sep = ";"
	}
	if sw.Var == SweepRate && strings.HasPrefix(v, "saturate") {
		sw.Saturate = true
		from := "1"
		if _, f, ok := strings.Cut(v, ":"); ok {
			from = f
		}
		v = from
	}
	for _, p := range strings.Split(v, sep) {
		if p = strings.TrimSpace(p); p != "" {
			sw.Values = append(sw.Values, p)
		}
	}
	return sw, sw.validate()
}

func (sw *Sweep) validate() error {
	if len(sw.Values) == 0 {
		return errors.New("a sweep needs at least one value")
	}
	if len(sw.Values) > 64 {
		return fmt.Errorf("a sweep of %d points is too long (at most 64)", len(sw.Values))
	}
	for _, v := range sw.Values {
		switch sw.Var {
		case SweepConcurrency:
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 100000 {
				return fmt.Errorf("concurrency %q: want an integer in [1, 100000]", v)
			}
		case SweepRate:
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f > 0) || f > 1e6 {
				return fmt.Errorf("rate %q: want a number of requests per second in (0, 1e6]", v)
			}
		case SweepPrefix:
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f >= 0 && f <= 1) {
				return fmt.Errorf("prefix ratio %q: want a number in [0, 1]", v)
			}
		case SweepInput:
			if _, err := ParseDist(v); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown sweep variable %q (want concurrency, rate, prefix-ratio or input)", sw.Var)
		}
	}
	if sw.Saturate && sw.Var != SweepRate {
		return errors.New("saturate sweeps the rate")
	}
	return nil
}

// x is a point's position on the sweep's axis: the number itself, or an
// input distribution's mean.
func (sw *Sweep) x(v string) float64 {
	if sw.Var == SweepInput {
		d, _ := ParseDist(v)
		return round3(d.Mean())
	}
	f, _ := strconv.ParseFloat(v, 64)
	return f
}

// point returns the workload and options of one point.
func (sw *Sweep) point(wl Workload, o Options, k int, v string) (Workload, Options, error) {
	switch sw.Var {
	case SweepConcurrency:
		o.Concurrency, _ = strconv.Atoi(v)
		o.Rate = 0
	case SweepRate:
		o.Rate, _ = strconv.ParseFloat(v, 64)
		o.Concurrency = 0
	}
	// Every point gets prompts of its own: a server measured at the last
	// point would otherwise serve this one from its prefix cache, and the
	// generated overlap would no longer be what it found.
	switch w := wl.(type) {
	case *Synthetic:
		c := *w
		c.Seed += uint64(k) * 1_000_003
		wl = &c
	case *MultiTurn:
		c := *w
		c.Seed += uint64(k) * 1_000_003
		wl = &c
	}
	switch sw.Var {
	case SweepPrefix, SweepInput:
		syn, ok := wl.(*Synthetic)
		if !ok {
			return nil, o, fmt.Errorf("a %s sweep needs the synthetic workload, not %s", sw.Var, wl.Name())
		}
		c := *syn
		if sw.Var == SweepPrefix {
			c.PrefixRatio, _ = strconv.ParseFloat(v, 64)
		} else {
			c.Input, _ = ParseDist(v)
		}
		wl = &c
	}
	return wl, o, nil
}

// RunSweep runs wl once per point of sw against o's targets; run k is the
// k-th point. A point whose run cannot start is an error Result and the
// sweep goes on.
func RunSweep(ctx context.Context, wl Workload, o Options, sw Sweep) ([]*Result, error) {
	if err := sw.validate(); err != nil {
		return nil, err
	}
	values := sw.Values
	if sw.Saturate {
		values = values[:1]
	}
	var out []*Result
	for k := 0; k < len(values) && k < max(sw.MaxPoints, 1); k++ {
		if ctx.Err() != nil {
			break
		}
		v := values[k]
		pwl, po, err := sw.point(wl, o, k, v)
		if err != nil {
			return out, err
		}
		po.Run, po.LabelSuffix = k+1, o.LabelSuffix+" "+sw.Var+"="+v
		res, err := Run(ctx, pwl, po)
		if err != nil {
			res = &Result{Scenario: wl.Name(), Run: k + 1, Error: err.Error()}
			for _, t := range o.Targets {
				res.Labels = append(res.Labels, t.Label+po.LabelSuffix)
			}
		}
		res.SweepVar, res.SweepValue, res.SweepX = sw.Var, v, sw.x(v)
		out = append(out, res)
		if sw.Saturate {
			if res.Error != "" || sw.saturated(res) {
				break
			}
			f, _ := strconv.ParseFloat(v, 64)
			values = append(values, strconv.FormatFloat(f*2, 'g', -1, 64))
		}
	}
	return out, nil
}

// saturated reports whether any target fell behind the offered load or
// missed the SLO too often at this point. The offered load is the rate the
// Poisson arrivals actually had (requests over the last scheduled time),
// not the nominal rate: a short run's arrival count is itself random
// (±1/√n), and against the nominal rate that noise alone would read as
// saturation.
func (sw *Sweep) saturated(res *Result) bool {
	for _, s := range summarize([]*Result{res}, nil) {
		var recs []Record
		last := 0.0
		for i := range res.Records {
			if res.Records[i].Label == s.Label {
				recs = append(recs, res.Records[i])
				last = max(last, res.Records[i].ScheduledMs)
			}
		}
		if res.Rate > 0 && last > 0 && len(recs) > 0 {
			offered := float64(len(recs)) / (last / 1000)
			if s.ReqPerS < sw.SatThroughput*offered {
				return true
			}
		}
		if g := goodputOf(recs, sw.SLO, s.ElapsedS, 0); !sw.SLO.IsZero() && g.Attainment < sw.SatAttainment {
			return true
		}
	}
	return false
}

// SweepPoint is one target at one point of a sweep.
type SweepPoint struct {
	Var   string  `json:"var"`
	Value string  `json:"value"`
	X     float64 `json:"x"`
	Run   int     `json:"run"`
	// Target is the label without the point's suffix.
	Target     string  `json:"target"`
	Label      string  `json:"label"`
	Error      string  `json:"error,omitempty"`
	Offered    float64 `json:"offered_req_per_s,omitempty"`
	ReqPerS    float64 `json:"req_per_s"`
	OutTokPerS float64 `json:"out_tok_per_s"`
	Goodput    Goodput `json:"goodput"`
	Errors     int     `json:"errors"`
	TTFT       Stats   `json:"ttft_ms"`
	ITL        Stats   `json:"itl_ms"`
	E2E        Stats   `json:"e2e_ms"`
	// Overlap is the share of input tokens the workload meant to be
	// shared with an earlier request; CachedShare the share the server
	// reported cached (-1: not reported). Never one for the other.
	Overlap     float64 `json:"generated_overlap"`
	CachedShare float64 `json:"observed_cached_share"`
}

// sweepPoints lists every target at every point of the report's sweep
// runs, under the report's SLO.
func (r *Report) sweepPoints() []SweepPoint {
	var out []SweepPoint
	for _, res := range r.Runs {
		if res.SweepVar == "" {
			continue
		}
		sums := summarize([]*Result{res}, nil)
		for i, l := range res.Labels {
			p := SweepPoint{Var: res.SweepVar, Value: res.SweepValue, X: res.SweepX, Run: res.Run, Label: l,
				Target: strings.TrimSuffix(l, " "+res.SweepVar+"="+res.SweepValue), Offered: res.Rate, Error: res.Error, CachedShare: -1}
			if res.Error == "" && i < len(sums) {
				s := sums[i]
				var recs []Record
				for k := range res.Records {
					if res.Records[k].Label == l {
						recs = append(recs, res.Records[k])
					}
				}
				p.ReqPerS, p.OutTokPerS, p.Errors, p.TTFT, p.ITL, p.E2E = s.ReqPerS, s.OutTokPerS, s.Errors, s.TTFT, s.ITL, s.E2E
				p.Goodput = goodputOf(recs, r.SLO, res.Elapsed.Seconds(), r.costs[l])
				p.Overlap, p.CachedShare = overlapShares(recs)
			}
			out = append(out, p)
		}
	}
	return out
}

// overlapShares returns the generated overlap and the observed cached
// share of the successful records' input tokens.
func overlapShares(recs []Record) (overlap, cached float64) {
	var in, ov, ca int64
	reported := false
	for i := range recs {
		r := &recs[i]
		if !r.OK() {
			continue
		}
		in += int64(r.InputTokens)
		ov += int64(r.OverlapTokens)
		if r.CachedTokens >= 0 {
			reported = true
			ca += int64(r.CachedTokens)
		}
	}
	if in == 0 {
		return 0, -1
	}
	overlap = round3(float64(ov) / float64(in))
	cached = -1
	if reported {
		cached = round3(float64(ca) / float64(in))
	}
	return overlap, cached
}
