package doctor

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestKVEventsRebuildingVerdicts: a stream numbered from 1 (llm-d's
// simulators) is "rebuilding" for the rebuild window with no loss; the
// doctor used to warn "events were lost" on it. A real loss still warns,
// and for an upstream engine the fix names --upstream-kv-events-replay
// rather than Tandem's own engines' flag.
func TestKVEventsRebuildingVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name, health string
		verdict      Verdict
		fix          string
	}{
		{"numbered from 1", `{"workers":[{"id":"w0","kv_events":"rebuilding","kv_events_applied":12}]}`, OK, ""},
		{"lost, tandem engine", `{"workers":[{"id":"w0","kv_events":"rebuilding"}],
			"diagnostics":[{"code":"kv_events_lost","subject":"w0"}]}`, Warn, "--kv-events-replay-endpoint"},
		{"lost, upstream", `{"workers":[{"id":"w0","kv_events":"rebuilding"}],
			"diagnostics":[{"code":"kv_events_lost","subject":"w0"},{"code":"upstream_no_cached_tokens","subject":"w0"}]}`, Warn, "--upstream-kv-events-replay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h frontendHealth
			if err := json.Unmarshal([]byte(tc.health), &h); err != nil {
				t.Fatal(err)
			}
			d := &run{health: &h}
			d.kvEvents()
			if len(d.checks) != 1 {
				t.Fatalf("%d checks", len(d.checks))
			}
			c := d.checks[0]
			if c.Verdict != tc.verdict || !strings.Contains(c.Fix, tc.fix) {
				t.Fatalf("verdict %s, summary %q, fix %q", c.Verdict, c.Summary, c.Fix)
			}
		})
	}
}
