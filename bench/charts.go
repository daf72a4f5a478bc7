package bench

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// chart is one figure of the HTML report.
type chart struct {
	ID      string
	Title   string
	Caption string
	SVG     string
}

// labelsInOrder lists the report's labels as the summaries order them.
func (r *Report) labelsInOrder() []string {
	out := make([]string, 0, len(r.Summaries))
	for _, s := range r.Summaries {
		out = append(out, s.Label)
	}
	return out
}

// okValues collects get over each label's successful records.
func (r *Report) okValues(get func(*Record) []float64) map[string][]float64 {
	out := map[string][]float64{}
	for _, res := range r.Runs {
		for i := range res.Records {
			rec := &res.Records[i]
			if rec.OK() {
				out[rec.Label] = append(out[rec.Label], get(rec)...)
			}
		}
	}
	return out
}

// wideRange says whether values span enough decades for a log axis.
func wideRange(vals map[string][]float64) bool {
	lo, hi := math.Inf(1), 0.0
	for _, vs := range vals {
		for _, v := range vs {
			if v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	return hi > 0 && hi/lo > 30
}

// cdfChart plots each label's empirical CDF, at most 400 points a label.
func (r *Report) cdfChart(id, title, xlabel string, get func(*Record) []float64) string {
	vals := r.okValues(get)
	var ss []chartSeries
	for _, l := range r.labelsInOrder() {
		v := slices.Clone(vals[l])
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		// A step function: the CDF rises at each value and is flat
		// between, which a straight line through the points would hide.
		n := min(len(v), 400)
		s := chartSeries{Name: l, X: []float64{v[0]}, Y: []float64{0}}
		for k := range n {
			x := v[min(len(v)-1, ((k+1)*len(v)-1)/n)] // the value at quantile (k+1)/n
			s.X, s.Y = append(s.X, x, x), append(s.Y, s.Y[len(s.Y)-1], 100*float64(k+1)/float64(n))
		}
		ss = append(ss, s)
	}
	if len(ss) == 0 {
		return emptyChart(id, title, "no successful streamed requests")
	}
	return lineChart(id, title, axis{Label: xlabel, Log: wideRange(vals)}, axis{Label: "% of requests", Min: 0, Max: 100}, ss)
}

// itlChart plots each label's distribution of inter-token gaps as a step
// histogram (percent of gaps per bin), log-binned when the gaps span
// decades, as they do when a scheduler stalls decodes behind prefills.
func (r *Report) itlChart(id string) string {
	const title = "Inter-token latency distribution"
	vals := r.okValues(func(rec *Record) []float64 { return rec.ITLMs })
	lo, hi, minPos := math.Inf(1), math.Inf(-1), math.Inf(1)
	for _, vs := range vals {
		for _, v := range vs {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
			if v > 0 {
				minPos = math.Min(minPos, v)
			}
		}
	}
	if math.IsInf(lo, 1) {
		return emptyChart(id, title, "no inter-token gaps (non-streamed or single-token outputs)")
	}
	const bins = 40
	// Zero gaps (two chunks in one read) land in the first log bin.
	logBins := wideRange(vals) && !math.IsInf(minPos, 1)
	if logBins {
		lo = math.Max(minPos, hi/1e5)
	}
	edge := func(k int) float64 {
		if logBins {
			return math.Pow(10, math.Log10(lo)+(math.Log10(hi)-math.Log10(lo))*float64(k)/bins)
		}
		return lo + (hi-lo)*float64(k)/bins
	}
	if hi <= lo {
		hi = lo + 1
	}
	var ss []chartSeries
	for _, l := range r.labelsInOrder() {
		v := vals[l]
		if len(v) == 0 {
			continue
		}
		counts := make([]int, bins)
		for _, x := range v {
			var k int
			if logBins {
				k = int(float64(bins) * (math.Log10(math.Max(x, lo)) - math.Log10(lo)) / (math.Log10(hi) - math.Log10(lo)))
			} else {
				k = int(float64(bins) * (x - lo) / (hi - lo))
			}
			counts[min(max(k, 0), bins-1)]++
		}
		s := chartSeries{Name: l, X: []float64{edge(0)}, Y: []float64{0}}
		for k, c := range counts {
			pct := 100 * float64(c) / float64(len(v))
			s.X = append(s.X, edge(k), edge(k+1))
			s.Y = append(s.Y, pct, pct)
		}
		s.X, s.Y = append(s.X, edge(bins)), append(s.Y, 0)
		ss = append(ss, s)
	}
	top := 0.0
	for _, s := range ss {
		for _, y := range s.Y {
			top = math.Max(top, y)
		}
	}
	// Percentages: never let the axis's rounding run past 100.
	ya := axis{Label: "% of gaps", Min: 0, Max: math.Min(100, top*1.1)}
	return lineChart(id, title, axis{Label: "gap between content chunks (ms)", Log: logBins}, ya, ss)
}

// throughputChart plots completions (or output tokens) per second over
// time. Buckets are sized for about 50 points, but wide enough to average
// five completions each: a slow sequential run (prefix-reuse) in narrow
// buckets is a comb of 0s and 1s. A label run several times (modes ×
// runs) is averaged over its runs.
func (r *Report) throughputChart(id, title, ylabel string, weight func(*Record) float64) string {
	span := 0.0
	runs, done := map[string]int{}, map[string]int{}
	for _, res := range r.Runs {
		for _, l := range res.Labels {
			runs[l]++
		}
		for i := range res.Records {
			rec := &res.Records[i]
			span = math.Max(span, rec.EndMs()/1000)
			if rec.OK() {
				done[rec.Label]++
			}
		}
	}
	if span <= 0 {
		return emptyChart(id, title, "no completed requests")
	}
	minW := 0.0
	for l, n := range done {
		minW = math.Max(minW, 5/(float64(n)/float64(max(runs[l], 1))/span))
	}
	w := niceStep(math.Max(span/50, minW), 1)
	n := int(math.Ceil(span / w))
	width := func(k int) float64 { return math.Min(w, span-float64(k)*w) } // the last bucket ends at span
	sums := map[string][]float64{}
	for _, res := range r.Runs {
		for i := range res.Records {
			rec := &res.Records[i]
			if !rec.OK() {
				continue
			}
			if sums[rec.Label] == nil {
				sums[rec.Label] = make([]float64, n)
			}
			sums[rec.Label][min(int(rec.EndMs()/1000/w), n-1)] += weight(rec)
		}
	}
	var ss []chartSeries
	for _, l := range r.labelsInOrder() {
		b := sums[l]
		if b == nil {
			continue
		}
		s := chartSeries{Name: l}
		for k, v := range b {
			if wd := width(k); wd > w/20 {
				s.X = append(s.X, float64(k)*w+wd/2)
				s.Y = append(s.Y, v/wd/float64(max(runs[l], 1)))
			}
		}
		ss = append(ss, s)
	}
	return lineChart(id, title, axis{Label: fmt.Sprintf("time since start (s, %gs buckets)", w)}, axis{Label: ylabel}, ss)
}

func (r *Report) workerChart(id string) string {
	const title = "Requests per worker"
	seen := map[string]bool{}
	for _, s := range r.Summaries {
		for w := range s.Workers {
			seen[w] = true
		}
	}
	if len(seen) == 0 {
		return emptyChart(id, title, "no worker header in the responses")
	}
	workers := make([]string, 0, len(seen))
	for w := range seen {
		workers = append(workers, w)
	}
	sort.Strings(workers)
	if len(workers) > 32 {
		workers = workers[:32]
	}
	var ss []chartSeries
	for _, s := range r.Summaries {
		if len(s.Workers) == 0 {
			continue
		}
		cs := chartSeries{Name: s.Label}
		for _, w := range workers {
			cs.Y = append(cs.Y, float64(s.Workers[w]))
		}
		ss = append(ss, cs)
	}
	return barChart(id, title, workers, ss, "requests", 0, nil)
}

func (r *Report) hitChart(id string) string {
	const title = "Prefix-cache hits per mode"
	if len(r.Hits) == 0 {
		return emptyChart(id, title, "not a prefix-reuse run")
	}
	lines := r.hitLines()
	var cats []string
	ttft := chartSeries{Name: "hits by TTFT"}
	cached := chartSeries{Name: "hits by cached_tokens"}
	var totals []int
	ref := 0
	for _, l := range lines {
		name := l.Label
		t, c, n := 0, 0, 0
		for _, h := range l.Rows {
			t, c, n = t+h.TTFTHits, c+h.CachedHits, n+h.Rerequests
		}
		if n == 0 && l.Error != "" {
			name += " (error)"
		}
		cats = append(cats, name)
		ttft.Y, cached.Y = append(ttft.Y, float64(t)), append(cached.Y, float64(c))
		totals = append(totals, n)
		ref = max(ref, n)
	}
	note := func(s, c int) string {
		v := ttft.Y[c]
		if s == 1 {
			v = cached.Y[c]
		}
		if totals[c] == 0 {
			return ""
		}
		return fmt.Sprintf("%d/%d", int(v), totals[c])
	}
	return barChart(id, title, cats, []chartSeries{ttft, cached}, "hits (all runs)", float64(ref), note)
}

// charts returns the report's figures, always the same set so the page's
// layout (and the check that it renders) does not depend on the scenario.
func (r *Report) charts() []chart {
	ttft := func(rec *Record) []float64 {
		if rec.TTFTMs < 0 {
			return nil
		}
		return []float64{rec.TTFTMs}
	}
	return []chart{
		{ID: "chart-ttft-cdf", Title: "TTFT CDF", Caption: "Time to first token, from the scheduled send time.",
			SVG: r.cdfChart("chart-ttft-cdf", "Time to first token (CDF)", "TTFT (ms)", ttft)},
		{ID: "chart-itl", Title: "ITL distribution", Caption: "Every gap between consecutive content chunks.",
			SVG: r.itlChart("chart-itl")},
		{ID: "chart-e2e-cdf", Title: "E2E CDF", Caption: "End-to-end latency of successful requests.",
			SVG: r.cdfChart("chart-e2e-cdf", "End-to-end latency (CDF)", "E2E (ms)", func(rec *Record) []float64 { return []float64{rec.E2EMs} })},
		{ID: "chart-throughput", Title: "Throughput over time", Caption: "Successful completions per second.",
			SVG: r.throughputChart("chart-throughput", "Throughput over time", "requests/s", func(*Record) float64 { return 1 })},
		{ID: "chart-tokens", Title: "Output tokens over time", Caption: "Output tokens of completed requests per second.",
			SVG: r.throughputChart("chart-tokens", "Output tokens over time", "output tokens/s", func(rec *Record) float64 { return float64(rec.OutputTokens) })},
		{ID: "chart-workers", Title: "Requests per worker", Caption: "From the X-Tandem-Worker response header.",
			SVG: r.workerChart("chart-workers")},
		{ID: "chart-hits", Title: "Hits per mode", Caption: "Prefix-reuse re-requests judged hits; the dashed line is the number of re-requests.",
			SVG: r.hitChart("chart-hits")},
	}
}

// extraCharts are the figures only some reports have: sweep curves, the
// per-trial spread of an experiment, and the servers' queues over time.
func (r *Report) extraCharts() []chart {
	var out []chart
	if len(r.Sweep) > 0 {
		xl := r.Sweep[0].Var
		if xl == SweepInput {
			xl = "mean input length (tokens)"
		}
		curve := func(get func(p *SweepPoint) float64, suffix string) []chartSeries {
			var order []string
			by := map[string]*chartSeries{}
			for i := range r.Sweep {
				p := &r.Sweep[i]
				if p.Error != "" {
					continue
				}
				s := by[p.Target]
				if s == nil {
					s = &chartSeries{Name: p.Target + suffix}
					by[p.Target] = s
					order = append(order, p.Target)
				}
				s.X, s.Y = append(s.X, p.X), append(s.Y, get(p))
			}
			var ss []chartSeries
			for _, t := range order {
				ss = append(ss, *by[t])
			}
			return ss
		}
		ttft := append(curve(func(p *SweepPoint) float64 { return p.TTFT.P50 }, " p50"), curve(func(p *SweepPoint) float64 { return p.TTFT.P99 }, " p99")...)
		itl := append(curve(func(p *SweepPoint) float64 { return p.ITL.P50 }, " p50"), curve(func(p *SweepPoint) float64 { return p.ITL.P99 }, " p99")...)
		good := append(curve(func(p *SweepPoint) float64 { return p.Goodput.TokPerS }, " goodput"), curve(func(p *SweepPoint) float64 { return p.OutTokPerS }, " all output")...)
		out = append(out,
			chart{ID: "chart-sweep-ttft", Caption: "TTFT p50 and p99 at each point of the sweep; the dashed line is the SLO.",
				SVG: lineChart("chart-sweep-ttft", "TTFT against "+xl, axis{Label: xl}, axis{Label: "TTFT (ms)", Ref: r.SLO.TTFTMs, RefLabel: "SLO"}, ttft)},
			chart{ID: "chart-sweep-itl", Caption: "Inter-token gap p50 and p99 at each point; the dashed line is the SLO (a request's mean gap).",
				SVG: lineChart("chart-sweep-itl", "ITL against "+xl, axis{Label: xl}, axis{Label: "ITL (ms)", Ref: r.SLO.ITLMs, RefLabel: "SLO"}, itl)},
			chart{ID: "chart-sweep-goodput", Caption: "Output tokens/s of requests that met every SLO bound, beside all successful output.",
				SVG: lineChart("chart-sweep-goodput", "Goodput against "+xl, axis{Label: xl}, axis{Label: "output tokens/s"}, good)})
	}
	if x := r.Experiment; x != nil && len(x.Variants) > 0 {
		n := 0
		for _, v := range x.Variants {
			n = max(n, len(v.Figures["goodput_tok_per_s"].Values))
		}
		var cats []string
		for t := range n {
			cats = append(cats, fmt.Sprintf("trial %d", t+1))
		}
		var ss []chartSeries
		for _, v := range x.Variants {
			s := chartSeries{Name: v.Name}
			vals := v.Figures["goodput_tok_per_s"].Values
			for t := range n {
				y := 0.0
				if t < len(vals) {
					y = vals[t]
				}
				s.Y = append(s.Y, y)
			}
			ss = append(ss, s)
		}
		out = append(out, chart{ID: "chart-trials", Caption: "Goodput of every trial of every variant: the spread behind the intervals.",
			SVG: barChart("chart-trials", "Goodput per trial", cats, ss, "goodput tok/s", 0, nil)})
	}
	var qs []chartSeries
	seen := map[string]bool{}
	for _, res := range r.Runs {
		for i, l := range res.Labels {
			if seen[l] || i >= len(res.Server) || res.Server[i] == nil || len(res.Server[i].Series) == 0 {
				continue
			}
			seen[l] = true
			s := chartSeries{Name: l}
			for _, p := range res.Server[i].Series {
				s.X, s.Y = append(s.X, p.Ms/1000), append(s.Y, p.Waiting+p.Queued)
			}
			qs = append(qs, s)
		}
	}
	if len(qs) > 0 {
		out = append(out, chart{ID: "chart-server-queue", Caption: "Requests waiting in the server (engine queue + frontend queue, from /metrics) on the records' clock; first run of each target.",
			SVG: lineChart("chart-server-queue", "Server queue over time", axis{Label: "time since start (s)"}, axis{Label: "requests waiting"}, qs)})
	}
	return out
}
