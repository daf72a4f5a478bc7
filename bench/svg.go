package bench

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// The charts are drawn here as inline SVG rather than with a plotting
// library or JavaScript: the report must render offline, from one file,
// in any browser, and the few chart kinds needed are a page of code.

const (
	chartW  = 560
	chartH  = 340
	plotX0  = 64
	plotX1  = chartW - 18
	plotY0  = 40
	plotY1  = chartH - 84
	fontCSS = `font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif"`
)

// color returns series i's color (a colorblind-safe palette).
func color(i int) string {
	const p = "#0072B2#D55E00#009E73#CC79A7#E69F00#56B4E9#000000#F0E442"
	i %= len(p) / 7
	return p[i*7 : i*7+7]
}

type chartSeries struct {
	Name string
	X, Y []float64
}

type axis struct {
	Label    string
	Log      bool
	Min, Max float64 // both zero: from the data
	// Ref, when positive, is drawn as a dashed line across the plot (an
	// SLO bound) and labelled RefLabel.
	Ref      float64
	RefLabel string
}

// niceStep returns a step of 1, 2 or 5 × 10^k near span/n.
func niceStep(span float64, n int) float64 {
	if span <= 0 || math.IsNaN(span) || math.IsInf(span, 0) {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func fmtTick(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}

// scale maps data values to pixels along one axis.
type scale struct {
	log    bool
	lo, hi float64 // data range (log10 when log)
	p0, p1 float64 // pixel range
	ticks  []float64
}

func newScale(a axis, data []float64, p0, p1 float64, zeroBase bool) scale {
	lo, hi := a.Min, a.Max
	if lo == 0 && hi == 0 {
		lo, hi = math.Inf(1), math.Inf(-1)
		for _, v := range data {
			if a.Log && v <= 0 || math.IsNaN(v) {
				continue
			}
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		if math.IsInf(lo, 1) {
			lo, hi = 1, 10
		}
		if zeroBase && !a.Log {
			lo = math.Min(lo, 0)
			hi *= 1.05
		}
	}
	s := scale{log: a.Log, p0: p0, p1: p1}
	if a.Log {
		lo, hi = math.Log10(lo), math.Log10(hi)
		lo, hi = math.Floor(lo*4)/4, math.Ceil(hi*4)/4
		if hi-lo < 0.5 {
			lo, hi = lo-0.25, hi+0.25
		}
		for k := math.Floor(lo); k <= hi; k++ {
			for _, m := range []float64{1, 2, 5} {
				v := math.Log10(m) + k
				if v >= lo-1e-9 && v <= hi+1e-9 && (m == 1 || hi-lo < 3) {
					s.ticks = append(s.ticks, math.Pow(10, v))
				}
			}
		}
	} else {
		if hi <= lo {
			hi = lo + 1
		}
		st := niceStep(hi-lo, 5)
		lo, hi = math.Floor(lo/st)*st, math.Ceil(hi/st)*st
		for v := lo; v <= hi+st/2; v += st {
			s.ticks = append(s.ticks, math.Round(v/st)*st)
		}
	}
	s.lo, s.hi = lo, hi
	return s
}

func (s scale) px(v float64) float64 {
	if s.log {
		if v <= 0 {
			return math.NaN()
		}
		v = math.Log10(v)
	}
	return s.p0 + (v-s.lo)/(s.hi-s.lo)*(s.p1-s.p0)
}

type svgWriter struct{ sb strings.Builder }

func (w *svgWriter) f(format string, args ...any) { fmt.Fprintf(&w.sb, format, args...) }

func esc(s string) string { return html.EscapeString(s) }

func (w *svgWriter) open(id, title string) {
	w.f(`<svg xmlns="http://www.w3.org/2000/svg" id="%s" class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s" %s font-size="12">`,
		esc(id), chartW, chartH, chartW, chartH, esc(title), fontCSS)
	w.f(`<title>%s</title><rect width="%d" height="%d" fill="#fff"/>`, esc(title), chartW, chartH)
	w.f(`<text x="%d" y="22" font-size="15" font-weight="600" fill="#222">%s</text>`, plotX0, esc(title))
}

func (w *svgWriter) close() string {
	w.sb.WriteString(`</svg>`)
	return w.sb.String()
}

func (w *svgWriter) legend(names []string) {
	x := float64(plotX0)
	y := float64(chartH - 16)
	for i, n := range names {
		if n == "" {
			continue
		}
		wd := 26 + 7*float64(len([]rune(n)))
		if x+wd > chartW && x > plotX0 {
			x, y = plotX0, y+15 // would overflow: wrap (rarely needed)
		}
		w.f(`<rect x="%.1f" y="%.1f" width="14" height="10" fill="%s"/><text x="%.1f" y="%.1f" fill="#333">%s</text>`,
			x, y-9, color(i), x+18, y, esc(n))
		x += wd
	}
}

// emptyChart is a chart with nothing to plot; it still renders (and says
// why), so the page layout and its checks do not depend on the scenario.
func emptyChart(id, title, why string) string {
	var w svgWriter
	w.open(id, title)
	w.f(`<rect x="%d" y="%d" width="%d" height="%d" fill="#fafafa" stroke="#ddd"/>`, plotX0, plotY0, plotX1-plotX0, plotY1-plotY0)
	w.f(`<text class="empty" x="%d" y="%d" text-anchor="middle" fill="#777">%s</text>`, (plotX0+plotX1)/2, (plotY0+plotY1)/2, esc(why))
	return w.close()
}

// lineChart draws series as polylines over x and y axes.
func lineChart(id, title string, xa, ya axis, ss []chartSeries) string {
	var xs, ys []float64
	for _, s := range ss {
		xs, ys = append(xs, s.X...), append(ys, s.Y...)
	}
	if len(xs) == 0 {
		return emptyChart(id, title, "no data")
	}
	if ya.Ref > 0 {
		ys = append(ys, ya.Ref)
	}
	sx := newScale(xa, xs, plotX0, plotX1, false)
	sy := newScale(ya, ys, plotY1, plotY0, true)
	var w svgWriter
	w.open(id, title)
	w.grid(sx, sy, xa, ya)
	if ya.Ref > 0 {
		y := sy.px(ya.Ref)
		w.f(`<line class="ref" x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#b00" stroke-dasharray="6 4"/>`, plotX0, y, plotX1, y)
		w.f(`<text x="%d" y="%.1f" text-anchor="end" fill="#b00">%s</text>`, plotX1-4, y-4, esc(ya.RefLabel))
	}
	var names []string
	for i, s := range ss {
		names = append(names, s.Name)
		var d strings.Builder
		pen := false
		for k := range s.X {
			x, y := sx.px(s.X[k]), sy.px(s.Y[k])
			if math.IsNaN(x) || math.IsNaN(y) {
				pen = false
				continue
			}
			cmd := 'L'
			if !pen {
				cmd = 'M'
			}
			fmt.Fprintf(&d, "%c%.1f %.1f", cmd, x, y)
			pen = true
		}
		w.f(`<path class="series" data-series="%s" d="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round"/>`,
			esc(s.Name), d.String(), color(i))
	}
	w.legend(names)
	return w.close()
}

func (w *svgWriter) grid(sx, sy scale, xa, ya axis) {
	w.f(`<g class="grid" stroke="#e5e5e5">`)
	for _, t := range sx.ticks {
		x := sx.px(t)
		w.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>`, x, plotY0, x, plotY1)
	}
	for _, t := range sy.ticks {
		y := sy.px(t)
		w.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, plotX0, y, plotX1, y)
	}
	w.f(`</g><g class="axes" fill="#444">`)
	w.f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`, plotX0, plotY1, plotX1, plotY1)
	w.f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`, plotX0, plotY0, plotX0, plotY1)
	for _, t := range sx.ticks {
		w.f(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, sx.px(t), plotY1+16, fmtTick(t))
	}
	for _, t := range sy.ticks {
		w.f(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`, plotX0-6, sy.px(t)+4, fmtTick(t))
	}
	w.f(`<text x="%d" y="%d" text-anchor="middle">%s</text>`, (plotX0+plotX1)/2, plotY1+36, esc(xa.Label))
	w.f(`<text transform="translate(16 %d) rotate(-90)" text-anchor="middle">%s</text>`, (plotY0+plotY1)/2, esc(ya.Label))
	w.f(`</g>`)
}

// barChart draws grouped bars: one group per category, one bar per
// series (Y[c] is series' value in category c). note, if set, labels a
// bar; ref, if positive, draws a dashed reference line (e.g. the number of
// re-requests, the most hits possible).
func barChart(id, title string, cats []string, ss []chartSeries, yLabel string, ref float64, note func(s, c int) string) string {
	if len(cats) == 0 || len(ss) == 0 {
		return emptyChart(id, title, "no data")
	}
	var ys []float64
	for _, s := range ss {
		ys = append(ys, s.Y...)
	}
	ys = append(ys, ref)
	sy := newScale(axis{Label: yLabel}, ys, plotY1, plotY0, true)
	var w svgWriter
	w.open(id, title)
	w.f(`<g class="grid" stroke="#e5e5e5">`)
	for _, t := range sy.ticks {
		w.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, plotX0, sy.px(t), plotX1, sy.px(t))
	}
	w.f(`</g><g class="axes" fill="#444">`)
	w.f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`, plotX0, plotY1, plotX1, plotY1)
	for _, t := range sy.ticks {
		w.f(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`, plotX0-6, sy.px(t)+4, fmtTick(t))
	}
	w.f(`<text transform="translate(16 %d) rotate(-90)" text-anchor="middle">%s</text>`, (plotY0+plotY1)/2, esc(yLabel))
	groupW := float64(plotX1-plotX0) / float64(len(cats))
	barW := math.Min(groupW*0.8/float64(len(ss)), 48)
	rotate := len(cats) > 6
	for c, name := range cats {
		gx := float64(plotX0) + groupW*float64(c) + (groupW-barW*float64(len(ss)))/2
		cx := float64(plotX0) + groupW*(float64(c)+0.5)
		if rotate {
			w.f(`<text transform="translate(%.1f %d) rotate(-35)" text-anchor="end">%s</text>`, cx, plotY1+14, esc(name))
		} else {
			w.f(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, cx, plotY1+16, esc(name))
		}
		for si, s := range ss {
			v := 0.0
			if c < len(s.Y) {
				v = s.Y[c]
			}
			x := gx + barW*float64(si)
			y := sy.px(v)
			w.f(`<rect class="bar" data-series="%s" data-category="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, %s: %s</title></rect>`,
				esc(s.Name), esc(name), x, y, math.Max(barW-2, 1), math.Max(float64(plotY1)-y, 0), color(si), esc(name), esc(s.Name), fmtTick(v))
			if note != nil {
				if t := note(si, c); t != "" {
					w.f(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%s</text>`, x+barW/2-1, y-3, esc(t))
				}
			}
		}
	}
	w.f(`</g>`)
	if ref > 0 {
		y := sy.px(ref)
		w.f(`<line class="ref" x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#999" stroke-dasharray="5 4"/>`, plotX0, y, plotX1, y)
	}
	var names []string
	for _, s := range ss {
		names = append(names, s.Name)
	}
	w.legend(names)
	return w.close()
}
