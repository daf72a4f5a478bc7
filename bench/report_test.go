package bench

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// chartIDs are the figures every report carries.
func chartIDs() []string {
	return []string{"chart-ttft-cdf", "chart-itl", "chart-e2e-cdf", "chart-throughput", "chart-tokens", "chart-workers", "chart-hits"}
}

// sampleReport runs a small prefix-reuse experiment over fake servers (two
// modes that work and one that fails) and returns its report.
func sampleReport(t *testing.T) *Report {
	t.Helper()
	start, _ := fakeStarter(t)
	wl := PrefixReuse{Prefixes: 3, PrefixWords: 60, Rounds: 3, TailWords: 4, Output: 5, Endpoint: Chat, Seed: 1}
	runs, err := RunModes(context.Background(), wl, Options{Concurrency: 1, WorkerHeader: DefaultWorkerHeader}, []string{"cache", "nocache", "kv"}, 1, start)
	if err != nil {
		t.Fatal(err)
	}
	rep := NewReport(ScenarioPrefixReuse, runs, DefaultHitCriteria())
	rep.Command = "tandem bench prefix-reuse --modes cache,nocache,kv --start-server"
	rep.Settings = []Setting{{"prefixes", "3"}, {"note", `<script>alert("x")</script>`}}
	return rep
}

func TestReportFiles(t *testing.T) {
	rep := sampleReport(t)
	dir := filepath.Join(t.TempDir(), "out")
	if err := rep.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	nrec := len(rep.Records())
	if nrec != 18 {
		t.Fatalf("%d records, want 2 modes × 9", nrec)
	}
	// JSONL: one record a line, round-tripping.
	f, err := os.Open(filepath.Join(dir, FileRecordsJSONL))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	lines, hits := 0, 0
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %d: %v", lines+1, err)
		}
		if r.HitCached != nil && *r.HitCached {
			hits++
		}
		lines++
	}
	if lines != nrec || hits != 6 {
		t.Fatalf("JSONL has %d lines (want %d), %d cached hits (want 6)", lines, nrec, hits)
	}
	// CSV: a header and a row per record, ITL gaps included.
	cf, err := os.Open(filepath.Join(dir, FileRecordsCSV))
	if err != nil {
		t.Fatal(err)
	}
	defer cf.Close()
	rows, err := csv.NewReader(cf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != nrec+1 || rows[0][0] != "label" || len(rows[1]) != len(csvHeader()) {
		t.Fatalf("CSV: %d rows, header %v", len(rows), rows[0])
	}
	itlCol := -1
	for i, h := range rows[0] {
		if h == "itl_ms" {
			itlCol = i
		}
	}
	if n := len(strings.Fields(rows[1][itlCol])); n != 4 {
		t.Fatalf("CSV ITL cell %q, want 4 gaps", rows[1][itlCol])
	}
	// Summary JSON.
	b, err := os.ReadFile(filepath.Join(dir, FileSummary))
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Scenario  string    `json:"scenario"`
		Summaries []Summary `json:"summaries"`
		Hits      []HitRow  `json:"hits"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Scenario != ScenarioPrefixReuse || len(sum.Summaries) != 3 || len(sum.Hits) != 3 || sum.Summaries[0].TTFT.N != 9 {
		t.Fatalf("summary: %s", b[:min(len(b), 600)])
	}
	// HTML: self-contained, every chart present, untrusted text escaped.
	h, err := os.ReadFile(filepath.Join(dir, FileHTML))
	if err != nil {
		t.Fatal(err)
	}
	page := string(h)
	for _, id := range chartIDs() {
		if !strings.Contains(page, `<svg xmlns="http://www.w3.org/2000/svg" id="`+id+`"`) {
			t.Errorf("chart %s missing", id)
		}
	}
	if strings.Contains(page, "<script") || regexp.MustCompile(`(src|href)="https?:`).MatchString(page) {
		t.Error("the page has a script or an external resource")
	}
	if strings.Count(page, `class="bar"`) < 4 || !strings.Contains(page, "6/6") {
		t.Error("hit bars or their labels missing")
	}
}

func TestEmptyReportStillRenders(t *testing.T) {
	rep := NewReport("synthetic", []*Result{{Scenario: "synthetic", Labels: []string{"A"}, URLs: []string{"http://x"}, Models: []string{"m"}}}, DefaultHitCriteria())
	var sb strings.Builder
	if err := rep.WriteHTML(&sb); err != nil {
		t.Fatal(err)
	}
	for _, id := range chartIDs() {
		if !strings.Contains(sb.String(), `id="`+id+`"`) {
			t.Errorf("chart %s missing from an empty report", id)
		}
	}
	if err := rep.WriteText(&sb); err != nil {
		t.Fatal(err)
	}
}

func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// chromiumDOM writes rep and returns the DOM headless Chromium renders
// from it, skipping the test when no Chromium is installed.
func chromiumDOM(t *testing.T, rep *Report) string {
	t.Helper()
	bin := findChromium()
	if bin == "" {
		t.Skip("chromium not installed (Debian: apt-get install -y chromium); skipping the browser check")
	}
	dir := t.TempDir()
	if err := rep.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--user-data-dir=" + filepath.Join(dir, "profile"), "--dump-dom",
		"file://" + filepath.Join(dir, FileHTML)}
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	return string(out)
}

// checkCharts fails unless every chart id is an svg in dom with drawn
// series or bars.
func checkCharts(t *testing.T, dom string, ids []string) {
	t.Helper()
	for _, id := range ids {
		re := regexp.MustCompile(`(?s)<svg[^>]*id="` + id + `".*?</svg>`)
		svg := re.FindString(dom)
		if svg == "" {
			t.Errorf("DOM has no svg#%s", id)
			continue
		}
		if !strings.Contains(svg, `class="series"`) && !strings.Contains(svg, `class="bar"`) {
			t.Errorf("svg#%s has no drawn series or bars", id)
		}
	}
}

// TestReportRendersInChromium loads the HTML report in headless Chromium
// and checks the rendered DOM holds every chart with drawn marks: the page
// must work in a real browser, offline.
func TestReportRendersInChromium(t *testing.T) {
	dom := chromiumDOM(t, sampleReport(t))
	checkCharts(t, dom, chartIDs())
	if !strings.Contains(dom, `id="hits"`) || !strings.Contains(dom, "6/6") {
		t.Error("the hit table did not render")
	}
}

// experimentReport runs a two-variant experiment of two trials over fake
// servers that serve /metrics, as a sweep-free report with every extra
// section: intervals, verdict, per-trial spread and server queues.
func experimentReport(t *testing.T) *Report {
	t.Helper()
	start := func(_ context.Context, serve map[string]string) (string, func(), error) {
		f := &fakeServer{TTFT: 2 * time.Millisecond, TokenGap: time.Millisecond, Metrics: true}
		s := f.start(t)
		return s.URL, s.Close, nil
	}
	spec, err := ParseExperiment(strings.NewReader("name: x\nvariable: v\nvalues: [a, b]\nworkload: {input: 10, output: 4, requests: 4}\ntrials: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	plans, err := spec.Plan(fakeResources, nil)
	if err != nil {
		t.Fatal(err)
	}
	wl, o, _ := spec.Workload.Build(1)
	o.ScrapeEvery = 5 * time.Millisecond
	runs := RunExperiment(context.Background(), wl, o, plans, 2, start)
	rep := NewReport("experiment", runs, DefaultHitCriteria())
	rep.ApplySLO(SLO{TTFTMs: 500}, nil)
	rep.Experiment = Analyze("x", "v", plans, runs, rep.SLO)
	return rep
}

func sweepReport(t *testing.T) *Report {
	t.Helper()
	f := &fakeServer{TTFT: 2 * time.Millisecond, TokenGap: time.Millisecond, Metrics: true}
	s := f.start(t)
	sw, _ := ParseSweep("concurrency=1,2,3")
	runs, err := RunSweep(context.Background(), &Synthetic{Endpoint: Chat, Input: FixedDist(10), Output: FixedDist(4), Seed: 1},
		Options{Targets: []Target{{URL: s.URL}}, Requests: 6, ScrapeEvery: 5 * time.Millisecond}, sw)
	if err != nil {
		t.Fatal(err)
	}
	rep := NewReport("sweep", runs, DefaultHitCriteria())
	rep.ApplySLO(SLO{TTFTMs: 50, ITLMs: 5}, nil)
	return rep
}

// TestReportSweepAndExperimentSections checks the HTML of a sweep and of
// an experiment: curves with the SLO line, the interval table, the
// verdict, the per-trial bars and the server queue.
func TestReportSweepAndExperimentSections(t *testing.T) {
	for _, tc := range []struct {
		rep    *Report
		charts []string
		want   []string
	}{
		{sweepReport(t), []string{"chart-sweep-ttft", "chart-sweep-itl", "chart-sweep-goodput", "chart-server-queue"}, []string{`id="sweep"`, `class="ref"`}},
		{experimentReport(t), []string{"chart-trials", "chart-server-queue"}, []string{`id="experiment"`, `id="verdict"`, "±", "Break-even"}},
	} {
		var sb strings.Builder
		if err := tc.rep.WriteHTML(&sb); err != nil {
			t.Fatal(err)
		}
		checkCharts(t, sb.String(), tc.charts)
		for _, w := range tc.want {
			if !strings.Contains(sb.String(), w) {
				t.Errorf("%s report: no %q in the HTML", tc.rep.Scenario, w)
			}
		}
	}
}

func TestSweepAndExperimentRenderInChromium(t *testing.T) {
	dom := chromiumDOM(t, sweepReport(t))
	checkCharts(t, dom, []string{"chart-sweep-ttft", "chart-sweep-itl", "chart-sweep-goodput"})
	dom = chromiumDOM(t, experimentReport(t))
	checkCharts(t, dom, []string{"chart-trials"})
	if !strings.Contains(dom, `id="verdict"`) {
		t.Error("the verdict did not render")
	}
}
