package sim

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// The report is one self-contained HTML page: inline CSS and SVG, no
// script and no external asset, so it opens offline and can be attached
// to an issue or a CI artifact as is.

// palette colours the variants in Rows order; the static rows get grey
// tones so the planned ones stand out.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}

func (c *Comparison) colour(i int) string {
	r := c.Rows[i]
	if r.Static != nil {
		if r.Name == "static-peak" {
			return "#555555"
		}
		return "#aaaaaa"
	}
	return palette[i%len(palette)]
}

// maxPlotPoints bounds the points of one polyline; a longer timeline is
// thinned (every k-th point), which keeps a day-long trace's page small.
const maxPlotPoints = 2000

type series struct {
	name, colour string
	dash         bool
	xs, ys       []float64
}

// lineChart draws series over a shared x axis (seconds). yMax <= 0 scales
// to the data; NaN values break a line (an interval with no finished
// request has no attainment).
func lineChart(id, title, yLabel string, ss []series, yMax float64, pct bool) string {
	const w, h, ml, mr, mt, mb = 860.0, 260.0, 60.0, 150.0, 28.0, 36.0
	xMax := 0.0
	dataMax := 0.0
	for _, s := range ss {
		for i, x := range s.xs {
			xMax = max(xMax, x)
			if y := s.ys[i]; !math.IsNaN(y) && !math.IsInf(y, 0) {
				dataMax = max(dataMax, y)
			}
		}
	}
	if yMax <= 0 {
		yMax = niceCeil(dataMax)
	}
	xMax = max(xMax, 1)
	px := func(x float64) float64 { return ml + (w-ml-mr)*x/xMax }
	py := func(y float64) float64 { return mt + (h-mt-mb)*(1-min(max(y/yMax, 0), 1)) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="%s" class="chart" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="%s">`, id, w, h, w, h, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%.0f" y="18" class="title">%s</text>`, ml, html.EscapeString(title))
	// Axes and gridlines: 4 horizontal, 6 vertical.
	for i := 0; i <= 4; i++ {
		y := yMax * float64(i) / 4
		label := trimFloat(y)
		if pct {
			label = fmt.Sprintf("%.0f%%", 100*y)
		}
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/><text class="tick" x="%.1f" y="%.1f" text-anchor="end">%s</text>`,
			ml, w-mr, py(y), py(y), ml-4, py(y)+4, label)
	}
	for i := 0; i <= 6; i++ {
		x := xMax * float64(i) / 6
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, px(x), h-mb+14, fmtSeconds(x))
	}
	fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="middle">time</text>`, (ml+w-mr)/2, h-4)
	fmt.Fprintf(&b, `<text class="tick" transform="translate(12 %.1f) rotate(-90)" text-anchor="middle">%s</text>`, (mt+h-mb)/2, html.EscapeString(yLabel))
	for si, s := range ss {
		step := max(1, (len(s.xs)+maxPlotPoints-1)/maxPlotPoints)
		var seg []string
		flush := func() {
			if len(seg) > 0 {
				dash := ""
				if s.dash {
					dash = ` stroke-dasharray="6 3"`
				}
				fmt.Fprintf(&b, `<polyline class="series" data-series="%s" fill="none" stroke="%s" stroke-width="1.6"%s points="%s"/>`,
					html.EscapeString(s.name), s.colour, dash, strings.Join(seg, " "))
			}
			seg = seg[:0]
		}
		for i := 0; i < len(s.xs); i += step {
			y := s.ys[i]
			if math.IsNaN(y) || math.IsInf(y, 0) {
				flush()
				continue
			}
			seg = append(seg, fmt.Sprintf("%.1f,%.1f", px(s.xs[i]), py(y)))
		}
		flush()
		ly := mt + 14*float64(si)
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/><text class="legend" x="%.0f" y="%.1f">%s</text>`,
			w-mr+8, w-mr+24, ly, ly, s.colour, w-mr+28, ly+4, html.EscapeString(s.name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// barChart draws one horizontal bar per row, with a reference line at
// ref (the goal's fraction of the first bar tagged peak) when ref > 0.
func barChart(id, title string, names, colours []string, vals []float64, ref float64, refLabel string) string {
	const w, ml, mr, bh, gap, mt = 860.0, 150.0, 90.0, 20.0, 6.0, 28.0
	h := mt + float64(len(vals))*(bh+gap) + 24
	vMax := ref
	for _, v := range vals {
		vMax = max(vMax, v)
	}
	vMax = niceCeil(vMax)
	px := func(v float64) float64 { return ml + (w-ml-mr)*v/vMax }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="%s" class="chart" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="%s">`, id, w, h, w, h, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%.0f" y="18" class="title">%s</text>`, ml, html.EscapeString(title))
	for i, v := range vals {
		y := mt + float64(i)*(bh+gap)
		fmt.Fprintf(&b, `<text class="tick" x="%.0f" y="%.1f" text-anchor="end">%s</text>`, ml-6, y+bh-6, html.EscapeString(names[i]))
		fmt.Fprintf(&b, `<rect class="bar" data-series="%s" x="%.1f" y="%.1f" width="%.1f" height="%.0f" fill="%s"/>`, html.EscapeString(names[i]), ml, y, max(px(v)-ml, 0), bh, colours[i])
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f">%.0f</text>`, px(v)+4, y+bh-6, v)
	}
	if ref > 0 {
		fmt.Fprintf(&b, `<line class="ref" x1="%.1f" x2="%.1f" y1="%.0f" y2="%.1f" stroke="#000" stroke-dasharray="4 3"/><text class="tick" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`,
			px(ref), px(ref), mt-4, h-18, px(ref), h-6, html.EscapeString(refLabel))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if !(v > 0) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

func fmtSeconds(s float64) string {
	switch {
	case s >= 3600:
		return fmt.Sprintf("%.1fh", s/3600)
	case s >= 120:
		return fmt.Sprintf("%.0fm", s/60)
	}
	return fmt.Sprintf("%.0fs", s)
}

// ChartIDs are the ids of the report's charts, pool charts first (one per
// pool: "replicas-<pool>"), for tests and for linking.
func (c *Comparison) ChartIDs() []string {
	var ids []string
	for _, p := range c.Config.Pools(0, 0) {
		ids = append(ids, "replicas-"+p.Name)
	}
	return append(ids, "load", "attainment", "worker-seconds")
}

// WriteHTML writes the comparison as a self-contained HTML report:
// the summary table, replicas over time per pool (one line per variant),
// the offered load, each interval's SLA attainment, and the worker-seconds
// per variant against the goal (60% of static-peak's).
func (c *Comparison) WriteHTML(w io.Writer) error {
	if len(c.Rows) == 0 {
		return fmt.Errorf("sim: report: no rows")
	}
	var b strings.Builder
	title := "Planner simulation: " + c.Title
	q := math.Round(c.Config.Targets.Quantile * 100)
	fmt.Fprintf(&b, `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>%s</title><style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}
table{border-collapse:collapse;margin:8px 0 16px}th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}.title{font-weight:600;font-size:13px}.tick,.legend{font-size:11px;fill:#444}
.grid{stroke:#e5e5e5}.note{color:#555;font-size:13px}.swatch{display:inline-block;width:10px;height:10px;margin-right:4px}
</style></head><body>`, html.EscapeString(title))
	fmt.Fprintf(&b, `<h1>%s</h1>`, html.EscapeString(title))
	mode := "aggregated (one pool)"
	if c.Config.Disagg {
		mode = "disaggregated (prefill and decode pools)"
	}
	fmt.Fprintf(&b, `<p class="note">%s; targets: p%.0f TTFT ≤ %s ms and p%.0f ITL ≤ %s ms; planner interval %v, worker startup %v. `+
		`A request meets the SLA when both its TTFT and its mean inter-token gap are within the targets; attainment is the share of requests that do.</p>`,
		mode, q, trimFloat(c.Config.Targets.TTFTMs), q, trimFloat(c.Config.Targets.ITLMs), c.Config.Interval, c.Config.Startup)
	if c.Profile != nil {
		fmt.Fprintf(&b, `<p class="note">Profile: %s (KV capacity %d tokens).</p>`, html.EscapeString(c.Profile.Worker), c.Profile.KVCapacityTokens)
	}

	b.WriteString(`<h2>Summary</h2><table id="summary"><tr><th>variant</th><th>attainment (both)</th><th>TTFT met</th><th>ITL met</th>`)
	fmt.Fprintf(&b, `<th>p%.0f TTFT ms</th><th>p%.0f ITL ms</th><th>worker-seconds</th><th>vs static-peak</th><th>unfinished</th></tr>`, q, q)
	for i, r := range c.Rows {
		n := float64(max(r.Requests, 1))
		name := r.Name
		if r.Static != nil {
			name += " " + fmtStatic(r.Static)
		}
		fmt.Fprintf(&b, `<tr><td><span class="swatch" style="background:%s"></span>%s</td><td>%.1f%%</td><td>%.1f%%</td><td>%.1f%%</td><td>%.0f</td><td>%.1f</td><td>%.0f</td><td>%.2f</td><td>%d</td></tr>`,
			c.colour(i), html.EscapeString(name), 100*r.Attainment, 100*float64(r.MetTTFT)/n, 100*float64(r.MetITL)/n, r.TTFTp, r.ITLp, r.TotalWorkerSecond, r.VsPeak, r.Unfinished)
	}
	b.WriteString(`</table><p class="note">The issue's goal: at least 95% attainment with at most 60% of static-peak's worker-seconds. ` +
		`static-peak and static-mean hold, for the whole run, the peak and the mean of the first planned variant's replicas.</p>`)

	b.WriteString(`<h2>Replicas over time</h2><p class="note">Workers per pool at each planner tick (starting ones included, draining ones not); static variants are dashed.</p>`)
	for _, p := range c.Config.Pools(0, 0) {
		var ss []series
		for i, r := range c.Rows {
			s := series{name: r.Name, colour: c.colour(i), dash: r.Static != nil}
			for _, pt := range r.Timeline {
				s.xs = append(s.xs, pt.T)
				s.ys = append(s.ys, float64(pt.Replicas[p.Name]))
			}
			ss = append(ss, s)
		}
		b.WriteString(lineChart("replicas-"+p.Name, "replicas: "+p.Name+" pool", "workers", ss, 0, false))
	}

	b.WriteString(`<h2>Load</h2><p class="note">Arrivals per second in each interval (the trace: the same for every variant).</p>`)
	load := series{name: "requests/s", colour: "#333333"}
	for _, pt := range c.Rows[0].Timeline {
		load.xs = append(load.xs, pt.T)
		load.ys = append(load.ys, pt.Rate)
	}
	b.WriteString(lineChart("load", "offered load", "requests/s", []series{load}, 0, false))

	b.WriteString(`<h2>SLA attainment</h2><p class="note">Share of the requests finishing in each interval that met both targets (gaps: nothing finished).</p>`)
	var att []series
	for i, r := range c.Rows {
		s := series{name: r.Name, colour: c.colour(i), dash: r.Static != nil}
		for _, pt := range r.Timeline {
			s.xs = append(s.xs, pt.T)
			s.ys = append(s.ys, pt.Attain)
		}
		att = append(att, s)
	}
	b.WriteString(lineChart("attainment", "SLA attainment per interval", "met both targets", att, 1, true))

	b.WriteString(`<h2>Worker-seconds</h2><p class="note">Time every worker existed, starting included, summed over the run; the dashed line is 60% of static-peak's.</p>`)
	var names, cols []string
	var vals []float64
	ref := 0.0
	for i, r := range c.Rows {
		names, cols, vals = append(names, r.Name), append(cols, c.colour(i)), append(vals, r.TotalWorkerSecond)
		if r.Name == "static-peak" {
			ref = 0.6 * r.TotalWorkerSecond
		}
	}
	b.WriteString(barChart("worker-seconds", "worker-seconds per variant", names, cols, vals, ref, "60% of static-peak"))

	if d := c.Rows[0].Decisions; len(d) > 0 {
		fmt.Fprintf(&b, `<h2>Scaling decisions: %s</h2><p class="note">Ticks where %s changed a pool (holds omitted).</p><table id="decisions"><tr><th>t</th><th>pool</th><th>from</th><th>to</th><th>policy proposed</th><th>reason</th><th>sized for</th><th>predicted req/s</th></tr>`,
			html.EscapeString(c.Rows[0].Name), html.EscapeString(c.Rows[0].Name))
		shown := 0
		for _, x := range d {
			if x.Desired == x.Current {
				continue
			}
			if shown++; shown > 500 {
				b.WriteString(`<tr><td colspan="8">… (first 500 shown)</td></tr>`)
				break
			}
			fmt.Fprintf(&b, `<tr><td>%s</td><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%s</td><td>%s</td><td>%.1f</td></tr>`,
				fmt.Sprintf("%ds", x.At.Unix()), html.EscapeString(x.Pool), x.Current, x.Desired, x.Proposed, html.EscapeString(x.Reason), html.EscapeString(x.Why), x.Predicted.Rate)
		}
		b.WriteString(`</table>`)
	}
	b.WriteString(`</body></html>` + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func fmtStatic(m map[string]int) string {
	var parts []string
	for _, k := range []string{PoolAgg, PoolPrefill, PoolDecode} {
		if v, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%d", k, v))
		}
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
