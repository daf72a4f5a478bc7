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

// TestReportRendersInChromium loads the HTML report in headless Chromium
// and checks the rendered DOM holds every chart with drawn marks: the page
// must work in a real browser, offline.
func TestReportRendersInChromium(t *testing.T) {
	bin := findChromium()
	if bin == "" {
		t.Skip("chromium not installed (Debian: apt-get install -y chromium); skipping the browser check")
	}
	rep := sampleReport(t)
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
	dom := string(out)
	for _, id := range chartIDs() {
		re := regexp.MustCompile(`(?s)<svg[^>]*id="` + id + `".*?</svg>`)
		svg := re.FindString(dom)
		if svg == "" {
			t.Errorf("rendered DOM has no svg#%s", id)
			continue
		}
		if !strings.Contains(svg, `class="series"`) && !strings.Contains(svg, `class="bar"`) {
			t.Errorf("svg#%s has no drawn series or bars", id)
		}
	}
	if !strings.Contains(dom, `id="hits"`) || !strings.Contains(dom, "6/6") {
		t.Error("the hit table did not render")
	}
}
