package bench

import (
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"
)

// htmlPage is the report page. Everything it shows is inline: styles,
// tables and SVG charts, no script and no fetch, so the file renders the
// same offline, attached to an issue, or years later.
const htmlPage = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px auto; max-width: 1160px; color: #222; padding: 0 12px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.meta { color: #666; font-size: 13px; }
code { background: #f4f4f4; padding: 1px 4px; border-radius: 3px; font-size: 12px; word-break: break-all; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: right; vertical-align: top; }
th:first-child, td:first-child { text-align: left; }
th { background: #f6f6f6; }
td.err { color: #b00; text-align: left; }
.charts { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 16px; }
figure { margin: 0; border: 1px solid #e3e3e3; border-radius: 6px; padding: 6px; background: #fff; }
figure svg { width: 100%; height: auto; display: block; }
figcaption { font-size: 12px; color: #555; padding: 4px 6px; }
.note { font-size: 12px; color: #555; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p class="meta">Generated {{.Created}}{{if .Command}} by <code>{{.Command}}</code>{{end}}</p>
{{if .Interrupted}}<p class="note"><b>Interrupted:</b> the figures cover the requests that finished.</p>{{end}}

<h2>Summary</h2>
<table id="summary">
<tr>{{range .SummaryHead}}<th>{{.}}</th>{{end}}</tr>
{{range .SummaryRows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
<p class="note">Latencies in milliseconds. TTFT and E2E count from the scheduled send time (open loop: the arrival the schedule asked for, so the tool's own lateness is not hidden). ITL is every gap between content chunks.{{if .ABNote}} {{.ABNote}}{{end}}</p>

{{if .Overhead}}<h2>Frontend overhead</h2>
<table id="overhead">
<tr><th>concurrency</th><th>direct TTFT p50</th><th>frontend TTFT p50</th><th>added p50</th><th>added p90</th><th>added p99</th><th>added mean</th><th>added E2E p50</th><th>out tok/s direct*</th><th>out tok/s frontend*</th></tr>
{{range .Overhead}}<tr><td>{{.Concurrency}}</td><td>{{f2 .DirectTTFTP50}}</td><td>{{f2 .FrontendTTFTP50}}</td><td>{{f2 .AddedTTFTP50}}</td><td>{{f2 .AddedTTFTP90}}</td><td>{{f2 .AddedTTFTP99}}</td><td>{{f2 .AddedTTFTMean}}</td><td>{{f2 .AddedE2EP50}}</td><td>{{f1 .DirectOutTokS}}</td><td>{{f1 .FrontendOutTokS}}</td></tr>
{{end}}</table>
<p class="note">The same requests (salted per target so neither serves the other from cache) went straight to the worker and through the frontend, interleaved; "added" is frontend minus direct. * Throughput each would sustain with all slots its own: concurrency / mean E2E × mean output tokens (Little's law), as interleaving gives each target half of the run.</p>{{end}}

{{if .HitLines}}<h2>Prefix-reuse hits</h2>
<table id="hits">
<tr><th>mode / target</th><th>TTFT hits per run</th><th>cached_tokens hits per run</th><th>first TTFT p50</th><th>hit TTFT p50</th><th>miss TTFT p50</th><th>workers per prefix (sum)</th></tr>
{{range .HitLines}}{{if and .Error (eq .Spread "")}}<tr><td>{{.Label}}</td><td class="err" colspan="6">error: {{.Error}}</td></tr>
{{else}}<tr><td>{{.Label}}</td><td>{{.TTFT}}</td><td>{{.Cached}}</td><td>{{ms .First}}</td><td>{{ms .Hit}}</td><td>{{ms .Miss}}</td><td>{{.Spread}}</td></tr>
{{end}}{{end}}</table>
<p class="note">{{.Criteria}}. "Workers per prefix" sums, over prefixes, the distinct workers that served it: equal to the number of prefixes when routing kept every prefix on one worker.</p>{{end}}

{{if .Experiment}}<h2>Experiment: {{.Experiment.Name}}</h2>
<p class="note">One variable: <b>{{.Experiment.Variable}}</b>; {{.Experiment.Trials}} trial(s) in interleaved order; every figure is the mean over trials ± the 95% confidence interval (Student's t).</p>
<table id="experiment">
<tr><th>figure</th>{{range .Experiment.Variants}}<th>{{.Name}}</th>{{end}}</tr>
{{range .ExpRows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
<table id="verdict"><tr><th>variant</th><th>baseline</th><th>goodput ratio (95% CI)</th><th>cost ratio D/A</th><th>verdict</th><th>why</th></tr>
{{range .Experiment.Verdicts}}<tr><td>{{.Variant}}</td><td>{{.Baseline}}</td><td>{{.GoodputRatio}}</td><td>{{f2 .CostRatio}}</td><td><b>{{.Outcome}}</b></td><td style="text-align:left">{{.Reason}}</td></tr>
{{end}}</table>
<p class="note">Break-even: a variant pays when its goodput ÷ the baseline's is above its cost ÷ the baseline's, with the whole interval above the line.</p>{{end}}

{{if .Sweep}}<h2>Sweep</h2>
<table id="sweep"><tr><th>target</th><th>{{(index .Sweep 0).Var}}</th><th>req/s</th><th>out tok/s</th><th>goodput tok/s</th><th>SLO met</th><th>TTFT p50</th><th>TTFT p99</th><th>ITL p50</th><th>ITL p99</th><th>E2E p99</th><th>errors</th><th>generated overlap</th><th>observed cached</th></tr>
{{range .Sweep}}{{if .Error}}<tr><td>{{.Target}}</td><td>{{.Value}}</td><td class="err" colspan="12">error: {{.Error}}</td></tr>
{{else}}<tr><td>{{.Target}}</td><td>{{.Value}}</td><td>{{f2 .ReqPerS}}</td><td>{{f1 .OutTokPerS}}</td><td>{{f1 .Goodput.TokPerS}}</td><td>{{pct .Goodput.Attainment}}</td><td>{{f1 .TTFT.P50}}</td><td>{{f1 .TTFT.P99}}</td><td>{{f2 .ITL.P50}}</td><td>{{f2 .ITL.P99}}</td><td>{{f1 .E2E.P99}}</td><td>{{.Errors}}</td><td>{{pct .Overlap}}</td><td>{{if lt .CachedShare 0.0}}not reported{{else}}{{pct .CachedShare}}{{end}}</td></tr>
{{end}}{{end}}</table>{{end}}

<h2>Charts</h2>
<div class="charts">
{{range .Charts}}<figure id="fig-{{.ID}}">{{.SVG}}<figcaption>{{.Caption}}</figcaption></figure>
{{end}}</div>

{{if .Errors}}<h2>Errors</h2>
<table id="errors"><tr><th>target</th><th>kind</th><th>count</th><th>first message</th></tr>
{{range .Errors}}<tr><td>{{.Label}}</td><td>{{.Kind}}</td><td>{{.Count}}</td><td class="err">{{.Message}}</td></tr>
{{end}}</table>{{end}}

{{if .Settings}}<h2>Settings</h2>
<details><summary class="note">every flag of the run ({{len .Settings}})</summary>
<table id="settings">{{range .Settings}}<tr><td>{{.Name}}</td><td style="text-align:left">{{.Value}}</td></tr>{{end}}</table></details>{{end}}

<h2>Files</h2>
<p class="note"><code>records.jsonl</code> and <code>records.csv</code> hold one line per request (every inter-token gap included); <code>summary.json</code> holds the tables above.</p>
</body>
</html>
`

type errorLine struct {
	Label, Kind, Message string
	Count                int
}

type htmlData struct {
	Title, Created, Command string
	Interrupted             bool
	Settings                []Setting
	SummaryHead             []string
	SummaryRows             [][]string
	ABNote                  string
	Overhead                []OverheadRow
	HitLines                []hitLine
	Criteria                string
	Charts                  []struct {
		ID, Caption string
		SVG         template.HTML
	}
	Errors     []errorLine
	Experiment *ExperimentResult
	ExpRows    [][]string
	Sweep      []SweepPoint
}

// WriteHTML writes the self-contained HTML report.
func (r *Report) WriteHTML(w io.Writer) error {
	t, err := template.New("report").Funcs(template.FuncMap{"f1": f1, "f2": f2, "ms": msOrDash,
		"pct": func(v float64) string { return f1(100*v) + "%" }}).Parse(htmlPage)
	if err != nil {
		return fmt.Errorf("report template: %w", err)
	}
	d := htmlData{Title: r.Title, Created: r.Created.Format("2006-01-02 15:04:05 MST"), Command: r.Command, Settings: r.Settings,
		Overhead: r.Overhead, Criteria: r.criteriaText()}
	for _, res := range r.Runs {
		d.Interrupted = d.Interrupted || res.Interrupted
	}
	cols, ratio := r.abColumns()
	d.SummaryHead = append([]string{""}, r.labelsInOrder()...)
	d.SummaryHead = append(d.SummaryHead, cols...)
	for _, row := range summaryRows(r) {
		cells := []string{row.name}
		for i := range r.Summaries {
			cells = append(cells, row.cell(&r.Summaries[i]))
		}
		for c := range cols {
			cell := ""
			if row.metric != "" {
				cell = ratio(c, row.metric)
			}
			cells = append(cells, cell)
		}
		d.SummaryRows = append(d.SummaryRows, cells)
	}
	if len(cols) > 0 {
		d.ABNote = "Ratio columns divide each target's figure by the first target's, both measured in the same interleaved run."
	}
	if len(r.Hits) > 0 {
		d.HitLines = r.hitLines()
	}
	d.Experiment, d.Sweep = r.Experiment, r.Sweep
	if x := r.Experiment; x != nil {
		res := []string{"resources"}
		cost := []string{"cost per hour"}
		for _, v := range x.Variants {
			res, cost = append(res, resText(v.Resources)), append(cost, strconv.FormatFloat(v.CostPerHour, 'f', -1, 64))
		}
		d.ExpRows = append(d.ExpRows, res, cost)
		for _, f := range x.sortedFigures() {
			row := []string{f}
			for _, v := range x.Variants {
				if c, ok := v.Figures[f]; ok {
					row = append(row, c.String())
				} else {
					row = append(row, "-")
				}
			}
			d.ExpRows = append(d.ExpRows, row)
		}
	}
	for _, c := range append(r.charts(), r.extraCharts()...) {
		// The SVG is built by svg.go, which escapes every text it embeds.
		d.Charts = append(d.Charts, struct {
			ID, Caption string
			SVG         template.HTML
		}{c.ID, c.Caption, template.HTML(c.SVG)})
	}
	d.Errors = r.errorLines()
	if err := t.Execute(w, d); err != nil {
		return fmt.Errorf("rendering report: %w", err)
	}
	return nil
}

func (r *Report) errorLines() []errorLine {
	type key struct{ label, kind string }
	idx := map[key]int{}
	var out []errorLine
	for _, rec := range r.Records() {
		if rec.OK() {
			continue
		}
		k := key{rec.Label, rec.ErrorKind}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, errorLine{Label: rec.Label, Kind: rec.ErrorKind, Message: rec.Error})
		}
		out[i].Count++
	}
	runErrs := map[string]int{}
	for _, res := range r.Runs {
		if res.Error == "" {
			continue
		}
		k := strings.Join(res.Labels, ",") + "\x00" + res.Error
		if i, ok := runErrs[k]; ok {
			out[i].Count++ // the same failure in another run
			continue
		}
		runErrs[k] = len(out)
		out = append(out, errorLine{Label: strings.Join(res.Labels, ","), Kind: "run failed", Message: res.Error, Count: 1})
	}
	return out
}
