package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// ScenarioDisaggTTFT names the disaggregation TTFT scenario.
const ScenarioDisaggTTFT = "disagg-ttft"

// DisaggTTFT is the prompt set that decides whether disaggregated prefill
// pays (seed report §4.5; its figures are in docs/benchmarks.md): the seed
// measured disaggregation slower than KV-routed aggregation on its
// 2-prefix case and slower still across 1 GbE, because every prompt's KV
// crossed the link. Each round sends
// Prefixes prompts of PrefixWords shared words plus a TailWords tail
// that changes every round (mostly cached: moving KV should not pay), and
// one fresh prompt per LongWords entry (no cache anywhere: the case where
// only link speed decides). Run it against several --url targets
// (aggregated, --disagg auto, --disagg always) so the same requests reach
// each, interleaved, and the report's ratios are the comparison.
type DisaggTTFT struct {
	Rounds      int
	Prefixes    int
	PrefixWords int
	TailWords   int
	LongWords   []int
	// Output is max_tokens: 1 makes latency ≈ TTFT even unstreamed.
	Output    int
	Endpoint  Endpoint
	IgnoreEOS bool
	Seed      uint64
}

// DefaultDisaggTTFT returns the seed's shapes: 2 prefixes of 1,536 words
// with 256-word tails (85.7 % shared) and fresh 1,500- and 3,000-word
// prompts, 6 rounds.
func DefaultDisaggTTFT() DisaggTTFT {
	return DisaggTTFT{Rounds: 6, Prefixes: 2, PrefixWords: 1536, TailWords: 256, LongWords: []int{1500, 3000},
		Output: 4, Endpoint: Completions, IgnoreEOS: true, Seed: 1}
}

// Name implements Workload.
func (*DisaggTTFT) Name() string { return ScenarioDisaggTTFT }

func (d *DisaggTTFT) perRound() int { return d.Prefixes + len(d.LongWords) }

// Sessions implements Workload.
func (d *DisaggTTFT) Sessions() int { return d.Rounds * d.perRound() }

// Validate checks the configuration.
func (d *DisaggTTFT) Validate() error {
	if d.Rounds < 1 || d.Prefixes < 0 || d.perRound() < 1 || d.Output < 1 || (d.Prefixes > 0 && d.PrefixWords < 1) || d.TailWords < 0 {
		return fmt.Errorf("disagg-ttft needs ≥1 round, ≥1 prompt per round, output ≥1 and prefixes of ≥1 word (got %d rounds, %d prefixes of %d words, %d long prompts, output %d)",
			d.Rounds, d.Prefixes, d.PrefixWords, len(d.LongWords), d.Output)
	}
	for _, n := range d.LongWords {
		if n < 1 {
			return fmt.Errorf("disagg-ttft: long prompts need ≥1 word, got %d", n)
		}
	}
	return nil
}

// Case names the prompt kind of a Record of this workload (its Prefix tag).
func (d *DisaggTTFT) Case(prefix int) string {
	if prefix < d.Prefixes {
		return fmt.Sprintf("prefix-%d (%d+%d words)", prefix, d.PrefixWords, d.TailWords)
	}
	if k := prefix - d.Prefixes; k < len(d.LongWords) {
		return fmt.Sprintf("fresh %d words", d.LongWords[k])
	}
	return "?"
}

// NewSession implements Workload: session i is case i%perRound of round
// i/perRound, the same on every target.
func (d *DisaggTTFT) NewSession(i, _ int) Session {
	round, c := i/d.perRound(), i%d.perRound()
	var sb strings.Builder
	words := 0
	if c < d.Prefixes {
		sb.Grow((d.PrefixWords + d.TailWords) * 7)
		appendWords(&sb, newRNG(d.Seed, 21, uint64(c)), d.PrefixWords)
		appendWords(&sb, newRNG(d.Seed, 22, uint64(i)), d.TailWords)
		words = d.PrefixWords + d.TailWords
	} else {
		words = d.LongWords[c-d.Prefixes]
		sb.Grow(words * 7)
		appendWords(&sb, newRNG(d.Seed, 23, uint64(i)), words)
	}
	req := &Request{Endpoint: d.Endpoint, MaxTokens: d.Output, IgnoreEOS: d.IgnoreEOS, InputTokens: words,
		Tag: Tag{Session: i, Prefix: c, Round: round}}
	if d.Endpoint == Completions {
		req.Prompt = sb.String()
	} else {
		req.Messages = []Message{{Role: "user", Content: sb.String()}}
	}
	return &oneShot{req: req}
}

// DisaggRow is the TTFT of one prompt case on one target, and its ratio
// to the first target's (the baseline, normally aggregated serving).
type DisaggRow struct {
	Case, Label        string
	N                  int
	P50Ms, P99Ms       float64
	P50Ratio, P99Ratio float64 // vs the first target; 0 for the first
	CachedFrac         float64 // mean cached_tokens ÷ prompt tokens
	SkippedFirstRound  bool
}

// DisaggTable breaks a run's TTFT down by prompt case and target. The
// first round is left out when there are several: it fills every cache,
// and the question is the steady state.
func (d *DisaggTTFT) DisaggTable(res *Result) []DisaggRow {
	type key struct {
		c     int
		label string
	}
	ttft := map[key][]float64{}
	cached := map[key][]float64{}
	for _, r := range res.Records {
		if !r.OK() || r.TTFTMs < 0 || (d.Rounds > 1 && r.Round == 0) {
			continue
		}
		k := key{r.Prefix, r.Label}
		ttft[k] = append(ttft[k], r.TTFTMs)
		if r.CachedTokens >= 0 && r.InputTokens > 0 {
			cached[k] = append(cached[k], float64(r.CachedTokens)/float64(r.InputTokens))
		}
	}
	var rows []DisaggRow
	for c := range d.perRound() {
		var base *Stats
		for _, l := range res.Labels {
			xs := ttft[key{c, l}]
			if len(xs) == 0 {
				continue
			}
			slices.Sort(xs)
			st := statsOf(xs)
			row := DisaggRow{Case: d.Case(c), Label: l, N: st.N, P50Ms: round3(st.P50), P99Ms: round3(st.P99), SkippedFirstRound: d.Rounds > 1}
			if cs := cached[key{c, l}]; len(cs) > 0 {
				var s float64
				for _, v := range cs {
					s += v
				}
				row.CachedFrac = round3(s / float64(len(cs)))
			}
			if base == nil {
				base = &st
			} else if base.P50 > 0 && base.P99 > 0 {
				row.P50Ratio, row.P99Ratio = round3(st.P50/base.P50), round3(st.P99/base.P99)
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// WriteDisaggTable prints rows as a table.
func WriteDisaggTable(w io.Writer, rows []DisaggRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\ttarget\tn\tTTFT p50 ms\tTTFT p99 ms\tp50 ×base\tp99 ×base\tcached")
	for _, r := range rows {
		rp50, rp99 := "1×", "1×"
		if r.P50Ratio > 0 {
			rp50, rp99 = f2(r.P50Ratio)+"×", f2(r.P99Ratio)+"×"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%.0f%%\n", r.Case, r.Label, r.N, f1(r.P50Ms), f1(r.P99Ms), rp50, rp99, 100*r.CachedFrac)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("disagg table: %w", err)
	}
	return nil
}
