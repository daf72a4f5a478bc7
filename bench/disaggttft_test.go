package bench

import (
	"strings"
	"testing"
	"time"
)

func TestDisaggTTFTWorkload(t *testing.T) {
	d := DefaultDisaggTTFT()
	d.PrefixWords, d.TailWords, d.LongWords, d.Rounds = 40, 8, []int{30, 60}, 3
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if d.Sessions() != 12 {
		t.Fatalf("sessions %d", d.Sessions())
	}
	prompt := func(i int) string { req, _, _ := d.NewSession(i, 0).Next(nil); return req.Prompt }
	cases := []struct {
		name       string
		a, b       int
		samePrefix bool // the first PrefixWords words are equal
		words      int  // words of a
	}{
		{"prefix 0 across rounds shares the prefix", 0, 4, true, 48},
		{"prefix 1 across rounds shares the prefix", 1, 5, true, 48},
		{"the two prefixes differ", 0, 1, false, 48},
		{"fresh prompts are fresh every round", 2, 6, false, 30},
		{"second fresh case is its length", 3, 7, false, 60},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pa, pb := strings.Fields(prompt(tc.a)), strings.Fields(prompt(tc.b))
			if len(pa) != tc.words {
				t.Fatalf("%d words, want %d", len(pa), tc.words)
			}
			same := strings.Join(pa[:20], " ") == strings.Join(pb[:20], " ")
			if same != tc.samePrefix {
				t.Fatalf("prefix shared %v, want %v", same, tc.samePrefix)
			}
			if prompt(tc.a) != prompt(tc.a) {
				t.Fatal("sessions are not pure functions of i")
			}
		})
	}
	for _, bad := range []DisaggTTFT{{Rounds: 0, Output: 1, LongWords: []int{5}}, {Rounds: 1, Output: 1}, {Rounds: 1, Output: 1, LongWords: []int{0}}} {
		if bad.Validate() == nil {
			t.Fatalf("%+v validated", bad)
		}
	}
}

// TestDisaggTTFTTable: two targets, one 12× slower to first token, same
// requests interleaved; the table shows it per case, first round left out.
// The gap is wide so that a loaded machine's scheduling delays (tens of
// milliseconds on a busy 2-core runner) cannot close it.
func TestDisaggTTFTTable(t *testing.T) {
	fast := (&fakeServer{TTFT: 5 * time.Millisecond, Worker: "w"}).start(t)
	slow := (&fakeServer{TTFT: 60 * time.Millisecond, Worker: "w"}).start(t)
	d := DefaultDisaggTTFT()
	d.PrefixWords, d.TailWords, d.LongWords, d.Rounds = 30, 5, []int{50}, 3
	res := mustRun(t, &d, Options{Targets: []Target{{URL: fast.URL, Label: "aggregated"}, {URL: slow.URL, Label: "always"}}, Concurrency: 1})
	rows := d.DisaggTable(res)
	if len(rows) != 6 {
		t.Fatalf("%d rows: %+v", len(rows), rows)
	}
	for _, r := range rows {
		if r.N != 2 {
			t.Fatalf("%s %s: n=%d, want 2 (rounds 2-3)", r.Case, r.Label, r.N)
		}
		switch r.Label {
		case "aggregated":
			if r.P50Ratio != 0 {
				t.Fatalf("baseline ratio %v", r.P50Ratio)
			}
		case "always":
			if r.P50Ratio < 1.8 || r.P99Ratio < 1.5 {
				t.Fatalf("%s: ratios %v/%v, want ≈12", r.Case, r.P50Ratio, r.P99Ratio)
			}
		}
	}
	var sb strings.Builder
	if err := WriteDisaggTable(&sb, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "fresh 50 words") || !strings.Contains(sb.String(), "p99 ×base") {
		t.Fatal(sb.String())
	}
}
