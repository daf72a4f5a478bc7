package bench

import (
	"math"
	"slices"
	"sort"
)

// Stats summarises a sample. Percentiles interpolate linearly between
// order statistics.
type Stats struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}

// Median is the interpolated median of xs (0 for none); xs is not
// modified. Tests that compare configurations use it too.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return quantile(s, 0.5)
}

func statsOf(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	r := func(v float64) float64 { return math.Round(v*1000) / 1000 }
	return Stats{N: len(s), Mean: r(sum / float64(len(s))), P50: r(quantile(s, .5)), P90: r(quantile(s, .9)),
		P99: r(quantile(s, .99)), Min: s[0], Max: s[len(s)-1]}
}

// Summary aggregates one label's records (over all runs that have it).
type Summary struct {
	Label      string         `json:"label"`
	URL        string         `json:"url"`
	Model      string         `json:"model"`
	Requests   int            `json:"requests"`
	OK         int            `json:"ok"`
	Errors     int            `json:"errors"`
	ErrorKinds map[string]int `json:"error_kinds,omitempty"`
	// ElapsedS is the wall time of the runs the label took part in;
	// throughputs divide by it.
	ElapsedS     float64 `json:"elapsed_s"`
	ReqPerS      float64 `json:"req_per_s"`
	OutTokPerS   float64 `json:"out_tok_per_s"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	// CachedTokens sums cached_tokens over the requests that reported it
	// (CachedReports of them).
	CachedTokens int64 `json:"cached_tokens"`
	// OverlapTokens sums the generated overlap (Record.OverlapTokens).
	OverlapTokens int64          `json:"overlap_tokens"`
	CachedReports int            `json:"cached_reports"`
	TTFT          Stats          `json:"ttft_ms"`
	ITL           Stats          `json:"itl_ms"`
	E2E           Stats          `json:"e2e_ms"`
	SendLag       Stats          `json:"send_lag_ms"`
	Workers       map[string]int `json:"workers,omitempty"`
	// Hits totals prefix-reuse hits over runs; nil for other workloads.
	Hits *HitRow `json:"hits,omitempty"`
	// Cancelled counts requests cut by the user (Ctrl-C): neither
	// successes nor errors.
	Cancelled int `json:"cancelled,omitempty"`
	// Goodput is what met the report's SLO (Report.ApplySLO).
	Goodput *Goodput `json:"goodput,omitempty"`
	// Server holds what the target's /metrics said over the runs
	// (nil when it was not scraped).
	Server *ServerMetrics `json:"server,omitempty"`
}

// summarize builds a Summary per label in order of first appearance.
func summarize(runs []*Result, hits []HitRow) []Summary {
	var order []string
	by := map[string]*Summary{}
	ttft, itl, e2e, lag := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	for _, res := range runs {
		for i, l := range res.Labels {
			s := by[l]
			if s == nil {
				s = &Summary{Label: l, Workers: map[string]int{}, ErrorKinds: map[string]int{}}
				by[l] = s
				order = append(order, l)
			}
			if i < len(res.URLs) {
				s.URL, s.Model = res.URLs[i], res.Models[i]
			}
			s.ElapsedS += res.Elapsed.Seconds()
			if i < len(res.Cancelled) {
				s.Cancelled += res.Cancelled[i]
			}
			if i < len(res.Server) && res.Server[i] != nil {
				s.Server = mergeServer(s.Server, res.Server[i])
			}
		}
		for i := range res.Records {
			r := &res.Records[i]
			s := by[r.Label]
			if s == nil {
				continue
			}
			s.Requests++
			if !r.OK() {
				s.Errors++
				s.ErrorKinds[r.ErrorKind]++
				continue
			}
			s.OK++
			s.InputTokens += int64(r.InputTokens)
			s.OutputTokens += int64(r.OutputTokens)
			s.OverlapTokens += int64(r.OverlapTokens)
			if r.CachedTokens >= 0 {
				s.CachedTokens += int64(r.CachedTokens)
				s.CachedReports++
			}
			if r.Worker != "" {
				s.Workers[r.Worker]++
			}
			if r.TTFTMs >= 0 {
				ttft[r.Label] = append(ttft[r.Label], r.TTFTMs)
			}
			itl[r.Label] = append(itl[r.Label], r.ITLMs...)
			e2e[r.Label] = append(e2e[r.Label], r.E2EMs)
			lag[r.Label] = append(lag[r.Label], r.SendLagMs)
		}
	}
	for _, h := range hits {
		s := by[h.Label]
		if s == nil {
			continue
		}
		if s.Hits == nil {
			s.Hits = &HitRow{Label: h.Label}
		}
		s.Hits.Rerequests += h.Rerequests
		s.Hits.TTFTHits += h.TTFTHits
		s.Hits.CachedHits += h.CachedHits
		s.Hits.CachedReported = s.Hits.CachedReported || h.CachedReported
		s.Hits.Errors += h.Errors
		if h.Error != "" {
			s.Hits.Error = h.Error
		}
	}
	out := make([]Summary, 0, len(order))
	for _, l := range order {
		s := by[l]
		if s.ElapsedS > 0 {
			s.ReqPerS = round3(float64(s.OK) / s.ElapsedS)
			s.OutTokPerS = round3(float64(s.OutputTokens) / s.ElapsedS)
		}
		s.ElapsedS = round3(s.ElapsedS)
		s.TTFT, s.ITL, s.E2E, s.SendLag = statsOf(ttft[l]), statsOf(itl[l]), statsOf(e2e[l]), statsOf(lag[l])
		out = append(out, *s)
	}
	return out
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// Ratio compares one metric of a target with the first target of the same
// run (an A/B run measures both in one interleaved run, so the ratio is
// free of run-to-run drift).
type Ratio struct {
	Run    int     `json:"run"`
	Metric string  `json:"metric"`
	Base   string  `json:"base"`
	Other  string  `json:"other"`
	BaseV  float64 `json:"base_value"`
	OtherV float64 `json:"other_value"`
	// Ratio is OtherV / BaseV (0 when BaseV is 0).
	Ratio float64 `json:"ratio"`
	// Diff is OtherV - BaseV: for latencies, what the other target adds.
	Diff float64 `json:"diff"`
}

// ratioMetrics lists the metrics compared, in display order.
func ratioMetrics(s *Summary) []struct {
	name string
	v    float64
} {
	return []struct {
		name string
		v    float64
	}{
		{"ttft_p50_ms", s.TTFT.P50}, {"ttft_p90_ms", s.TTFT.P90}, {"ttft_p99_ms", s.TTFT.P99}, {"ttft_mean_ms", s.TTFT.Mean},
		{"itl_p50_ms", s.ITL.P50}, {"itl_p90_ms", s.ITL.P90}, {"itl_p99_ms", s.ITL.P99}, {"itl_mean_ms", s.ITL.Mean},
		{"e2e_p50_ms", s.E2E.P50}, {"e2e_p90_ms", s.E2E.P90}, {"e2e_p99_ms", s.E2E.P99}, {"e2e_mean_ms", s.E2E.Mean},
		{"req_per_s", s.ReqPerS}, {"out_tok_per_s", s.OutTokPerS},
	}
}

// ratios compares, within every run that has several targets, each
// target with the run's first.
func ratios(runs []*Result) []Ratio {
	var out []Ratio
	for _, res := range runs {
		if len(res.Labels) < 2 || res.Error != "" {
			continue
		}
		sums := summarize([]*Result{res}, nil)
		idx := map[string]*Summary{}
		for i := range sums {
			idx[sums[i].Label] = &sums[i]
		}
		base := idx[res.Labels[0]]
		if base == nil {
			continue
		}
		bm := ratioMetrics(base)
		for _, l := range res.Labels[1:] {
			o := idx[l]
			if o == nil {
				continue
			}
			for k, m := range ratioMetrics(o) {
				r := Ratio{Run: res.Run, Metric: m.name, Base: base.Label, Other: o.Label, BaseV: bm[k].v, OtherV: m.v, Diff: round3(m.v - bm[k].v)}
				if bm[k].v != 0 {
					r.Ratio = round3(m.v / bm[k].v)
				}
				out = append(out, r)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Run < out[j].Run })
	return out
}
