package bench

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Setting is one line of the configuration echoed in reports.
type Setting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// OverheadRow is the frontend-overhead result at one concurrency: what
// going through the frontend adds to going straight to the worker.
type OverheadRow struct {
	Run             int     `json:"run"`
	Concurrency     int     `json:"concurrency"`
	Direct          string  `json:"direct"`
	Frontend        string  `json:"frontend"`
	DirectTTFTP50   float64 `json:"direct_ttft_p50_ms"`
	FrontendTTFTP50 float64 `json:"frontend_ttft_p50_ms"`
	AddedTTFTP50    float64 `json:"added_ttft_p50_ms"`
	AddedTTFTP90    float64 `json:"added_ttft_p90_ms"`
	AddedTTFTP99    float64 `json:"added_ttft_p99_ms"`
	AddedTTFTMean   float64 `json:"added_ttft_mean_ms"`
	AddedE2EP50     float64 `json:"added_e2e_p50_ms"`
	// Output tokens/s each would sustain alone at this concurrency,
	// from Little's law (see littleTokS).
	DirectOutTokS    float64 `json:"direct_out_tok_per_s"`
	FrontendOutTokS  float64 `json:"frontend_out_tok_per_s"`
	ThroughputRatio  float64 `json:"throughput_ratio"`
	DirectRequests   int     `json:"direct_requests"`
	FrontendRequests int     `json:"frontend_requests"`
}

// Report is a finished experiment: its runs, their records, and what was
// derived from them. Build it with NewReport.
type Report struct {
	Title     string        `json:"title"`
	Scenario  string        `json:"scenario"`
	Command   string        `json:"command,omitempty"`
	Created   time.Time     `json:"created"`
	Settings  []Setting     `json:"settings,omitempty"`
	Criteria  *HitCriteria  `json:"hit_criteria,omitempty"`
	Runs      []*Result     `json:"runs"`
	Summaries []Summary     `json:"summaries"`
	Ratios    []Ratio       `json:"ratios,omitempty"`
	Hits      []HitRow      `json:"hits,omitempty"`
	Overhead  []OverheadRow `json:"frontend_overhead,omitempty"`
	// SLO is what goodput was judged against (empty: every success).
	SLO SLO `json:"slo"`
	// Sweep holds one point per load level of a sweep.
	Sweep []SweepPoint `json:"sweep,omitempty"`
	// Experiment is set on an experiment's report.
	Experiment *ExperimentResult `json:"experiment,omitempty"`
	// costs is the hourly cost per label (ApplySLO).
	costs map[string]float64
}

// Scenario names with their own report sections.
const (
	ScenarioPrefixReuse      = "prefix-reuse"
	ScenarioFrontendOverhead = "frontend-overhead"
)

// NewReport derives summaries, A/B ratios, hit tables (prefix-reuse) and
// the overhead table (frontend-overhead) from runs. It marks hits on the
// runs' records.
func NewReport(scenario string, runs []*Result, crit HitCriteria) *Report {
	r := &Report{Title: "tandem bench " + scenario, Scenario: scenario, Created: time.Now(), Runs: runs}
	if scenario == ScenarioPrefixReuse {
		r.Criteria = &crit
		for _, res := range runs {
			if res.Error != "" {
				for _, l := range res.Labels {
					r.Hits = append(r.Hits, HitRow{Label: l, Run: res.Run, Error: res.Error})
				}
				continue
			}
			r.Hits = append(r.Hits, markHits(res.Records, crit)...)
		}
	}
	r.Summaries = summarize(runs, r.Hits)
	for _, res := range runs {
		if res.Error == "" {
			continue
		}
		for _, l := range res.Labels {
			if !slices.ContainsFunc(r.Summaries, func(s Summary) bool { return s.Label == l }) {
				r.Summaries = append(r.Summaries, Summary{Label: l})
			}
		}
	}
	r.Ratios = ratios(runs)
	if scenario == ScenarioFrontendOverhead {
		r.Overhead = overheadRows(runs)
	}
	r.ApplySLO(SLO{}, nil)
	return r
}

// littleTokS estimates the output tokens/s a target would sustain with
// all c slots its own (Little's law: c / mean E2E requests per second).
// Interleaving halves each target's share of the run, so its measured
// throughput says nothing on its own; its latency under the shared load
// does.
func littleTokS(s *Summary, c int) float64 {
	if s.OK == 0 || s.E2E.Mean <= 0 {
		return 0
	}
	return round3(float64(max(c, 1)) * float64(s.OutputTokens) / float64(s.OK) / (s.E2E.Mean / 1000))
}

func overheadRows(runs []*Result) []OverheadRow {
	var out []OverheadRow
	for _, res := range runs {
		if len(res.Labels) != 2 || res.Error != "" {
			continue
		}
		sums := summarize([]*Result{res}, nil)
		if len(sums) != 2 {
			continue
		}
		d, f := sums[0], sums[1]
		row := OverheadRow{Run: res.Run, Concurrency: res.Concurrency, Direct: d.Label, Frontend: f.Label,
			DirectTTFTP50: d.TTFT.P50, FrontendTTFTP50: f.TTFT.P50,
			AddedTTFTP50: round3(f.TTFT.P50 - d.TTFT.P50), AddedTTFTP90: round3(f.TTFT.P90 - d.TTFT.P90),
			AddedTTFTP99: round3(f.TTFT.P99 - d.TTFT.P99), AddedTTFTMean: round3(f.TTFT.Mean - d.TTFT.Mean),
			AddedE2EP50: round3(f.E2E.P50 - d.E2E.P50), DirectOutTokS: littleTokS(&d, res.Concurrency), FrontendOutTokS: littleTokS(&f, res.Concurrency),
			DirectRequests: d.Requests, FrontendRequests: f.Requests}
		if row.DirectOutTokS > 0 {
			row.ThroughputRatio = round3(row.FrontendOutTokS / row.DirectOutTokS)
		}
		out = append(out, row)
	}
	return out
}

// Records returns every run's records in run order.
func (r *Report) Records() []Record {
	var out []Record
	for _, res := range r.Runs {
		out = append(out, res.Records...)
	}
	return out
}

// msOrDash shows a median of nothing as "-" rather than 0 ms.
func msOrDash(v float64) string {
	if v == 0 {
		return "-"
	}
	return f1(v) + " ms"
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
func f2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// summaryRow is one row of the summary table: a name and a cell per label,
// plus the metric name its A/B ratio is filed under.
type summaryRow struct {
	name   string
	metric string
	cell   func(s *Summary) string
}

func summaryRows(r *Report) []summaryRow {
	stat := func(name, metric string, get func(s *Summary) float64) summaryRow {
		return summaryRow{name, metric, func(s *Summary) string {
			if s.OK == 0 {
				return "-"
			}
			return f2(get(s))
		}}
	}
	rows := []summaryRow{
		{"url", "", func(s *Summary) string {
			if s.URL == "" {
				return "-"
			}
			return s.URL
		}},
		{"requests ok/sent", "", func(s *Summary) string { return fmt.Sprintf("%d/%d", s.OK, s.Requests) }},
		{"errors", "", func(s *Summary) string { return errorCell(s) }},
		stat("throughput req/s", "req_per_s", func(s *Summary) float64 { return s.ReqPerS }),
		stat("output tok/s", "out_tok_per_s", func(s *Summary) float64 { return s.OutTokPerS }),
	}
	for _, m := range []struct {
		name, key string
		get       func(s *Summary) Stats
	}{{"TTFT", "ttft", func(s *Summary) Stats { return s.TTFT }}, {"ITL", "itl", func(s *Summary) Stats { return s.ITL }},
		{"E2E", "e2e", func(s *Summary) Stats { return s.E2E }}} {
		rows = append(rows,
			stat(m.name+" p50 ms", m.key+"_p50_ms", func(s *Summary) float64 { return m.get(s).P50 }),
			stat(m.name+" p90 ms", m.key+"_p90_ms", func(s *Summary) float64 { return m.get(s).P90 }),
			stat(m.name+" p99 ms", m.key+"_p99_ms", func(s *Summary) float64 { return m.get(s).P99 }),
			stat(m.name+" mean ms", m.key+"_mean_ms", func(s *Summary) float64 { return m.get(s).Mean }))
	}
	rows = append(rows,
		summaryRow{"tokens in/out (mean)", "", func(s *Summary) string {
			if s.OK == 0 {
				return "-"
			}
			return fmt.Sprintf("%s / %s", f1(float64(s.InputTokens)/float64(s.OK)), f1(float64(s.OutputTokens)/float64(s.OK)))
		}},
		summaryRow{"cached tokens", "", func(s *Summary) string {
			if s.OK == 0 {
				return "-"
			}
			if s.CachedReports == 0 || s.InputTokens == 0 {
				return "not reported"
			}
			return fmt.Sprintf("%d (%.1f%% of input)", s.CachedTokens, 100*float64(s.CachedTokens)/float64(s.InputTokens))
		}})
	rows = append(rows, summaryRow{"generated overlap", "", func(s *Summary) string {
		if s.OK == 0 || s.InputTokens == 0 {
			return "-"
		}
		return fmt.Sprintf("%d (%.1f%% of input)", s.OverlapTokens, 100*float64(s.OverlapTokens)/float64(s.InputTokens))
	}})
	rows = append(rows, goodputRows(r)...)
	rows = append(rows, serverRows(r)...)
	if slices.ContainsFunc(r.Summaries, func(s Summary) bool { return s.Cancelled > 0 }) {
		rows = append(rows, summaryRow{"cancelled", "", func(s *Summary) string { return strconv.Itoa(s.Cancelled) }})
	}
	if slices.ContainsFunc(r.Summaries, func(s Summary) bool { return s.SendLag.P99 > 1 }) {
		rows = append(rows, stat("send lag p99 ms", "", func(s *Summary) float64 { return s.SendLag.P99 }))
	}
	if len(r.Hits) > 0 {
		rows = append(rows,
			summaryRow{"hits (TTFT)", "", func(s *Summary) string {
				if s.Hits == nil || s.Hits.Rerequests == 0 {
					return "-"
				}
				return fmt.Sprintf("%d/%d", s.Hits.TTFTHits, s.Hits.Rerequests)
			}},
			summaryRow{"hits (cached_tokens)", "", func(s *Summary) string {
				if s.Hits == nil || s.Hits.Rerequests == 0 {
					return "-"
				}
				if !s.Hits.CachedReported {
					return "not reported"
				}
				return fmt.Sprintf("%d/%d", s.Hits.CachedHits, s.Hits.Rerequests)
			}})
	}
	rows = append(rows, summaryRow{"requests per worker", "", workerCell})
	return rows
}

func errorCell(s *Summary) string {
	if s.Errors == 0 {
		return "0"
	}
	var kinds []string
	for k, n := range s.ErrorKinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("%d (%s)", s.Errors, strings.Join(kinds, ", "))
}

func workerCell(s *Summary) string {
	if len(s.Workers) == 0 {
		return "-"
	}
	ws := make([]string, 0, len(s.Workers))
	for w := range s.Workers {
		ws = append(ws, w)
	}
	sort.Strings(ws)
	for i, w := range ws {
		ws[i] = fmt.Sprintf("%s %d", w, s.Workers[w])
	}
	return strings.Join(ws, ", ")
}

// abColumns returns, for a report of one run with several targets, the
// ratio columns "B/A", ... and a lookup of their cells.
func (r *Report) abColumns() ([]string, func(col int, metric string) string) {
	if len(r.Runs) != 1 || len(r.Runs[0].Labels) < 2 {
		return nil, nil
	}
	labels := r.Runs[0].Labels
	var cols []string
	for _, l := range labels[1:] {
		cols = append(cols, l+"/"+labels[0])
	}
	return cols, func(col int, metric string) string {
		for _, x := range r.Ratios {
			if x.Other == labels[col+1] && x.Metric == metric && x.BaseV != 0 {
				return fmt.Sprintf("%.3f", x.Ratio)
			}
		}
		return ""
	}
}

// WriteText writes the human summary: the summary table (with A/B ratio
// columns), then the scenario's own tables and the first errors.
func (r *Report) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "\n%s\n", r.Title)
	for _, res := range r.Runs {
		if res.Interrupted {
			fmt.Fprintln(bw, "(interrupted: the figures cover the requests that finished)")
			break
		}
	}
	// A report of no runs of its own (bench compare) has no summary table:
	// printing its header alone would be an empty table.
	if len(r.Summaries) > 0 {
		tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
		cols, ratio := r.abColumns()
		fmt.Fprint(tw, "\t")
		for _, s := range r.Summaries {
			fmt.Fprintf(tw, "%s\t", s.Label)
		}
		for _, c := range cols {
			fmt.Fprintf(tw, "%s\t", c)
		}
		fmt.Fprintln(tw)
		for _, row := range summaryRows(r) {
			fmt.Fprintf(tw, "%s\t", row.name)
			for i := range r.Summaries {
				fmt.Fprintf(tw, "%s\t", row.cell(&r.Summaries[i]))
			}
			for c := range cols {
				cell := ""
				if row.metric != "" {
					cell = ratio(c, row.metric)
				}
				fmt.Fprintf(tw, "%s\t", cell)
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("writing summary: %w", err)
		}
	}
	if len(r.Overhead) > 0 {
		fmt.Fprintln(bw, "\nfrontend overhead (frontend minus direct, same requests, interleaved)")
		tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "concurrency\tdirect TTFT p50\tfrontend TTFT p50\tadded p50\tadded p90\tadded p99\tadded mean\tadded E2E p50\tout tok/s direct*\tfrontend*\t")
		for _, o := range r.Overhead {
			fmt.Fprintf(tw, "%d\t%s ms\t%s ms\t%s ms\t%s ms\t%s ms\t%s ms\t%s ms\t%s\t%s\t\n", o.Concurrency, f2(o.DirectTTFTP50), f2(o.FrontendTTFTP50),
				f2(o.AddedTTFTP50), f2(o.AddedTTFTP90), f2(o.AddedTTFTP99), f2(o.AddedTTFTMean), f2(o.AddedE2EP50), f1(o.DirectOutTokS), f1(o.FrontendOutTokS))
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("writing overhead: %w", err)
		}
		fmt.Fprintln(bw, "* concurrency / mean E2E × mean output: what each sustains with every slot its own (Little's law)")
	}
	if len(r.Hits) > 0 {
		r.writeHits(bw)
	}
	if len(r.Sweep) > 0 {
		r.writeSweep(bw)
	}
	if r.Experiment != nil {
		r.Experiment.writeText(bw)
	}
	r.writeErrors(bw)
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing summary: %w", err)
	}
	return nil
}

// hitTable groups hit rows by label, runs in order, as the seed's table.
type hitLine struct {
	Label  string
	Rows   []HitRow
	Error  string
	TTFT   string // "60/60 60/60 60/60"
	Cached string
	First  float64
	Hit    float64
	Miss   float64
	Spread string
}

func (r *Report) hitLines() []hitLine {
	var order []string
	by := map[string]*hitLine{}
	for _, h := range r.Hits {
		l := by[h.Label]
		if l == nil {
			l = &hitLine{Label: h.Label}
			by[h.Label] = l
			order = append(order, h.Label)
		}
		l.Rows = append(l.Rows, h)
	}
	out := make([]hitLine, 0, len(order))
	for _, name := range order {
		l := by[name]
		var ttft, cached, spread []string
		var first, hit, miss []float64
		for _, h := range l.Rows {
			if h.Error != "" {
				l.Error = h.Error
				ttft = append(ttft, "error")
				cached = append(cached, "error")
				continue
			}
			ttft = append(ttft, fmt.Sprintf("%d/%d", h.TTFTHits, h.Rerequests))
			if h.CachedReported {
				cached = append(cached, fmt.Sprintf("%d/%d", h.CachedHits, h.Rerequests))
			} else {
				cached = append(cached, "n/a")
			}
			spread = append(spread, strconv.Itoa(h.Workers))
			if h.FirstTTFTMs > 0 {
				first = append(first, h.FirstTTFTMs)
			}
			if h.HitTTFTMs > 0 {
				hit = append(hit, h.HitTTFTMs)
			}
			if h.MissTTFTMs > 0 {
				miss = append(miss, h.MissTTFTMs)
			}
		}
		l.TTFT, l.Cached, l.Spread = strings.Join(ttft, " "), strings.Join(cached, " "), strings.Join(spread, " ")
		l.First, l.Hit, l.Miss = Median(first), Median(hit), Median(miss)
		out = append(out, *l)
	}
	return out
}

func (r *Report) criteriaText() string {
	c := DefaultHitCriteria()
	if r.Criteria != nil {
		c = *r.Criteria
	}
	return fmt.Sprintf("a re-request is a hit when its TTFT < %.0f%% of its prefix's first request's, or (cached) when cached_tokens ≥ %.0f%% of its prompt",
		100*c.TTFTFrac, 100*c.CachedFrac)
}

func (r *Report) writeHits(w io.Writer) {
	fmt.Fprintf(w, "\nprefix-reuse hits per run (%s)\n", r.criteriaText())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mode/target\tTTFT hits\tcached_tokens hits\tfirst TTFT p50\thit TTFT p50\tmiss TTFT p50\tworkers per prefix (sum)\t")
	for _, l := range r.hitLines() {
		if l.Error != "" && !strings.Contains(l.TTFT, "/") {
			// Long messages would stretch the columns: the errors
			// section lists them.
			fmt.Fprintf(tw, "%s\terror\terror\t\t\t\t\t\n", l.Label)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", l.Label, l.TTFT, l.Cached, msOrDash(l.First), msOrDash(l.Hit), msOrDash(l.Miss), l.Spread)
	}
	_ = tw.Flush()
}

func (r *Report) writeErrors(w io.Writer) {
	shown := map[string]int{}
	first := true
	for _, rec := range r.Records() {
		if rec.OK() || shown[rec.Label] >= 3 {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nfirst errors")
			first = false
		}
		shown[rec.Label]++
		fmt.Fprintf(w, "  %s: [%s] %s\n", rec.Label, rec.ErrorKind, rec.Error)
	}
	// A failed run repeats its error every run: say it once, with the runs.
	type runErr struct{ label, msg string }
	var order []runErr
	runs := map[runErr][]string{}
	for _, res := range r.Runs {
		if res.Error != "" {
			k := runErr{strings.Join(res.Labels, ","), res.Error}
			if runs[k] == nil {
				order = append(order, k)
			}
			runs[k] = append(runs[k], strconv.Itoa(res.Run))
		}
	}
	for _, k := range order {
		if first {
			fmt.Fprintln(w, "\nfirst errors")
			first = false
		}
		fmt.Fprintf(w, "  %s (run %s): %s\n", k.label, strings.Join(runs[k], ", "), k.msg)
	}
}

// Files a report directory holds.
const (
	FileRecordsJSONL = "records.jsonl"
	FileRecordsCSV   = "records.csv"
	FileSummary      = "summary.json"
	FileHTML         = "report.html"
)

// WriteDir writes the raw records (JSONL and CSV), the summary JSON and
// the HTML report into dir, creating it.
func (r *Report) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	steps := []struct {
		name  string
		write func(io.Writer) error
	}{
		{FileRecordsJSONL, r.writeJSONL},
		{FileRecordsCSV, r.writeCSV},
		{FileSummary, func(w io.Writer) error {
			e := json.NewEncoder(w)
			e.SetIndent("", "  ")
			return e.Encode(r)
		}},
		{FileHTML, r.WriteHTML},
	}
	for _, s := range steps {
		if err := writeFile(filepath.Join(dir, s.name), s.write); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("closing %s: %w", path, cerr)
		}
	}()
	bw := bufio.NewWriterSize(f, 256<<10)
	if err := write(bw); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func (r *Report) writeJSONL(w io.Writer) error {
	e := json.NewEncoder(w)
	for _, rec := range r.Records() {
		if rec.ITLMs == nil {
			rec.ITLMs = []float64{}
		}
		if err := e.Encode(rec); err != nil {
			return err
		}
	}
	return nil
}

func csvHeader() []string {
	return []string{"label", "target", "url", "run", "concurrency", "scenario", "seq", "session", "turn", "prefix", "round",
		"scheduled_ms", "send_lag_ms", "ttft_ms", "e2e_ms", "itl_count", "itl_mean_ms", "itl_ms", "input_tokens", "output_tokens",
		"cached_tokens", "usage_reported", "status", "error_kind", "error", "worker", "hit_ttft", "hit_cached"}
}

func (r *Report) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader()); err != nil {
		return err
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	optBool := func(b *bool) string {
		if b == nil {
			return ""
		}
		return strconv.FormatBool(*b)
	}
	for _, rec := range r.Records() {
		itl := make([]string, len(rec.ITLMs))
		sum := 0.0
		for i, v := range rec.ITLMs {
			itl[i], sum = num(v), sum+v
		}
		mean := ""
		if len(itl) > 0 {
			mean = num(round3(sum / float64(len(itl))))
		}
		row := []string{rec.Label, strconv.Itoa(rec.Target), rec.URL, strconv.Itoa(rec.Run), strconv.Itoa(rec.Concurrency), rec.Scenario,
			strconv.Itoa(rec.Seq), strconv.Itoa(rec.Session), strconv.Itoa(rec.Turn), strconv.Itoa(rec.Prefix), strconv.Itoa(rec.Round),
			num(rec.ScheduledMs), num(rec.SendLagMs), num(rec.TTFTMs), num(rec.E2EMs), strconv.Itoa(len(itl)), mean, strings.Join(itl, " "),
			strconv.Itoa(rec.InputTokens), strconv.Itoa(rec.OutputTokens), strconv.Itoa(rec.CachedTokens), strconv.FormatBool(rec.UsageReported),
			strconv.Itoa(rec.Status), rec.ErrorKind, rec.Error, rec.Worker, optBool(rec.HitTTFT), optBool(rec.HitCached)}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// goodputRows are the SLO rows of the summary table.
func goodputRows(r *Report) []summaryRow {
	name := "goodput tok/s (every success)"
	if !r.SLO.IsZero() {
		name = "goodput tok/s (SLO " + r.SLO.String() + ")"
	}
	has := func(s *Summary) bool { return s.Goodput != nil && s.OK > 0 }
	rows := []summaryRow{
		{name, "goodput_tok_per_s", func(s *Summary) string {
			if !has(s) {
				return "-"
			}
			return f2(s.Goodput.TokPerS)
		}},
	}
	if !r.SLO.IsZero() {
		rows = append(rows, summaryRow{"SLO met", "", func(s *Summary) string {
			if !has(s) {
				return "-"
			}
			return fmt.Sprintf("%d/%d (%.1f%%)", s.Goodput.Met, s.Requests, 100*s.Goodput.Attainment)
		}})
	}
	if slices.ContainsFunc(r.Summaries, func(s Summary) bool { return s.Goodput != nil && s.Goodput.CostPerHour > 0 }) {
		rows = append(rows, summaryRow{"cost per M good tokens", "", func(s *Summary) string {
			if !has(s) || s.Goodput.CostPerHour <= 0 {
				return "-"
			}
			return costText(s.Goodput.CostPerMTok)
		}})
	}
	return rows
}

func costText(c float64) string {
	if c < 0 {
		return "∞ (nothing met the SLO)"
	}
	return "$" + strconv.FormatFloat(c, 'f', 4, 64)
}

// serverRows are the rows from the targets' /metrics, when scraped.
func serverRows(r *Report) []summaryRow {
	if !slices.ContainsFunc(r.Summaries, func(s Summary) bool { return s.Server != nil }) {
		return nil
	}
	cell := func(fam string, v func(m *ServerMetrics) string) func(s *Summary) string {
		return func(s *Summary) string {
			m := s.Server
			switch {
			case m == nil:
				return "-"
			case m.Scrapes == m.Failed:
				return "not scraped"
			case fam != "" && slices.Contains(m.Missing, fam):
				return "not exported"
			}
			return v(m)
		}
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	return []summaryRow{
		{"server: prefix-cache hits / queries (tokens)", "", cell(famCacheHits, func(m *ServerMetrics) string {
			return fmt.Sprintf("%s / %s (%.1f%%)", num(m.CacheHitTokens), num(m.CacheQueryTokens), 100*m.CacheHitRate)
		})},
		{"server: evicted blocks", "", cell(famEvictions, func(m *ServerMetrics) string { return num(m.Evictions) })},
		{"server: preemptions", "", cell(famPreemptions, func(m *ServerMetrics) string { return num(m.Preemptions) })},
		{"server: KV transfer bytes (transfers)", "", cell(famXferBytes, func(m *ServerMetrics) string {
			return fmt.Sprintf("%s (%s)", num(m.TransferBytes), num(m.Transfers))
		})},
		{"server: disagg decisions", "", cell(famDisagg, func(m *ServerMetrics) string {
			if len(m.DisaggDecisions) == 0 {
				return "none"
			}
			var ks []string
			for k, v := range m.DisaggDecisions {
				ks = append(ks, k+" "+num(v))
			}
			sort.Strings(ks)
			return strings.Join(ks, ", ")
		})},
		{"server: engine queue max / mean", "", cell(famWaiting, func(m *ServerMetrics) string {
			return fmt.Sprintf("%s / %s", num(m.WaitingMax), num(m.WaitingMean))
		})},
		{"server: frontend queue max / mean", "", cell(famQueued, func(m *ServerMetrics) string {
			return fmt.Sprintf("%s / %s", num(m.QueuedMax), num(m.QueuedMean))
		})},
		{"server: KV cache usage max", "", cell(famKVUsage, func(m *ServerMetrics) string { return fmt.Sprintf("%.1f%%", 100*m.KVUsageMax) })},
	}
}

// writeSweep prints one line per target and point.
func (r *Report) writeSweep(w io.Writer) {
	fmt.Fprintf(w, "\nsweep of %s", r.Sweep[0].Var)
	if !r.SLO.IsZero() {
		fmt.Fprintf(w, " (SLO %s)", r.SLO)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tvalue\treq/s\tout tok/s\tgoodput tok/s\tSLO met\tTTFT p50\tTTFT p99\tITL p50\tITL p99\tE2E p99\terrors\toverlap\tcached\t")
	for _, p := range r.Sweep {
		if p.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\terror\t\t\t\t\t\t\t\t\t\t\t\t\n", p.Target, p.Value)
			continue
		}
		cached := "n/a"
		if p.CachedShare >= 0 {
			cached = fmt.Sprintf("%.1f%%", 100*p.CachedShare)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.1f%%\t%s\t%s\t%s\t%s\t%s\t%d\t%.1f%%\t%s\t\n", p.Target, p.Value, f2(p.ReqPerS), f1(p.OutTokPerS),
			f1(p.Goodput.TokPerS), 100*p.Goodput.Attainment, f1(p.TTFT.P50), f1(p.TTFT.P99), f2(p.ITL.P50), f2(p.ITL.P99), f1(p.E2E.P99),
			p.Errors, 100*p.Overlap, cached)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "latencies in ms; overlap: prompt tokens the workload shared with earlier requests; cached: what the server reported cached")
}

// LoadReport reads a report directory WriteDir wrote (summary.json and
// records.jsonl), for `tandem bench compare`.
func LoadReport(dir string) (*Report, error) {
	f, err := os.Open(filepath.Join(dir, FileSummary))
	if err != nil {
		return nil, fmt.Errorf("loading a saved run: %w", err)
	}
	defer f.Close()
	var r Report
	if err := json.NewDecoder(io.LimitReader(f, 1<<30)).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, FileSummary), err)
	}
	rf, err := os.Open(filepath.Join(dir, FileRecordsJSONL))
	if err != nil {
		return nil, fmt.Errorf("loading a saved run: %w", err)
	}
	defer rf.Close()
	type key struct {
		run   int
		label string
	}
	byRun := map[key]*Result{}
	for _, res := range r.Runs {
		if res == nil {
			continue
		}
		for _, l := range res.Labels {
			byRun[key{res.Run, l}] = res
		}
	}
	sc := bufio.NewScanner(rf)
	// A record holds every inter-token gap: a long stream is a long line.
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		var rec Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", filepath.Join(dir, FileRecordsJSONL), line, err)
		}
		res := byRun[key{rec.Run, rec.Label}]
		if res == nil {
			return nil, fmt.Errorf("%s line %d: run %d of %q is not in %s", filepath.Join(dir, FileRecordsJSONL), line, rec.Run, rec.Label, FileSummary)
		}
		res.Records = append(res.Records, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, FileRecordsJSONL), err)
	}
	return &r, nil
}
