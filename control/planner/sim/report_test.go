package sim

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// smallDay is a two-minute synthetic day.
func smallDay(t *testing.T) []Request {
	t.Helper()
	tr, err := Synthetic{Phases: DayPhases(2, 2*time.Minute), ISLMin: 500, ISLMax: 1500, OSLMin: 20, OSLMax: 60,
		SharedPrefixes: 2, SharedBlocks: 1, HashBlock: MooncakeBlock, Seed: 3}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// smallComparison is a two-minute synthetic day through both policies:
// enough ticks for every chart to have lines.
func smallComparison(t *testing.T, disagg bool) *Comparison {
	t.Helper()
	tr := smallDay(t)
	cfg := experimentConfig(disagg)
	pl, order := plans()
	c, err := Compare("small <day>", tr, cfg, cfg.Worker.Profile(), pl, order[:2])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestWriteHTML(t *testing.T) {
	for _, disagg := range []bool{false, true} {
		c := smallComparison(t, disagg)
		var buf bytes.Buffer
		if err := c.WriteHTML(&buf); err != nil {
			t.Fatal(err)
		}
		page := buf.String()
		checkReport(t, c, page)
		// Self-contained: no script, no external reference of any kind.
		for _, bad := range []string{"<script", "http://", "https://", "src=", "@import", "url("} {
			if strings.Contains(page, bad) {
				t.Errorf("disagg=%v: report contains %q", disagg, bad)
			}
		}
		if strings.Contains(page, "small <day>") || !strings.Contains(page, "small &lt;day&gt;") {
			t.Error("the title is not escaped")
		}
		// Every variant is in the summary and in each chart's legend.
		for _, r := range c.Rows {
			if !strings.Contains(page, ">"+r.Name) {
				t.Errorf("variant %s missing", r.Name)
			}
		}
		if disagg != strings.Contains(page, `id="replicas-prefill"`) {
			t.Errorf("disagg=%v: prefill chart presence wrong", disagg)
		}
	}
}

// checkReport fails unless every chart id is an svg with drawn series or
// bars, one bar per row in the worker-seconds chart.
func checkReport(t *testing.T, c *Comparison, page string) {
	t.Helper()
	for _, id := range c.ChartIDs() {
		svg := regexp.MustCompile(`(?s)<svg[^>]*id="` + id + `".*?</svg>`).FindString(page)
		if svg == "" {
			t.Errorf("no svg#%s", id)
			continue
		}
		if !strings.Contains(svg, `class="series"`) && !strings.Contains(svg, `class="bar"`) {
			t.Errorf("svg#%s has no drawn series or bars", id)
		}
		if id == "worker-seconds" {
			if n := strings.Count(svg, `class="bar"`); n != len(c.Rows) {
				t.Errorf("worker-seconds: %d bars for %d rows", n, len(c.Rows))
			}
		}
	}
	if !strings.Contains(page, `id="summary"`) {
		t.Error("no summary table")
	}
}

// TestHTMLRendersInChromium loads the report in headless Chromium, offline,
// and checks the rendered DOM still holds every chart.
func TestHTMLRendersInChromium(t *testing.T) {
	var bin string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Skip("chromium not installed; skipping the browser check")
	}
	c := smallComparison(t, true)
	dir := t.TempDir()
	path := filepath.Join(dir, "report.html")
	var buf bytes.Buffer
	if err := c.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--user-data-dir="+filepath.Join(dir, "profile"), "--dump-dom", "file://"+path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	checkReport(t, c, string(out))
}
