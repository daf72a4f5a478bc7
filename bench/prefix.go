package bench

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// PrefixReuse is the seed report's router experiment (§3): Prefixes
// synthetic prefixes of PrefixWords words are sent Rounds times, each
// round in a fresh shuffled order, every request ending in TailWords words
// of its own. Every request after a prefix's first is a re-request, and
// whether the server answered it from its prefix cache is judged by its
// TTFT against the prefix's first request and by cached_tokens.
type PrefixReuse struct {
	Prefixes    int
	PrefixWords int
	Rounds      int
	TailWords   int
	// Output is max_tokens; short, because only the prefill is studied.
	Output    int
	Endpoint  Endpoint
	IgnoreEOS bool
	Seed      uint64
}

// DefaultPrefixReuse returns the seed's parameters: 12 prefixes of 1,500
// words, 6 rounds, 24-word tails (72 requests, 60 re-requests).
func DefaultPrefixReuse() PrefixReuse {
	return PrefixReuse{Prefixes: 12, PrefixWords: 1500, Rounds: 6, TailWords: 24, Output: 16, Endpoint: Chat, IgnoreEOS: true, Seed: 1}
}

// Name implements Workload.
func (*PrefixReuse) Name() string { return "prefix-reuse" }

// Sessions implements Workload.
func (p *PrefixReuse) Sessions() int { return p.Prefixes * p.Rounds }

// Validate checks the configuration.
func (p *PrefixReuse) Validate() error {
	if p.Prefixes < 1 || p.PrefixWords < 1 || p.Rounds < 2 || p.TailWords < 0 || p.Output < 1 {
		return fmt.Errorf("prefix-reuse needs ≥1 prefix of ≥1 word, ≥2 rounds, a tail ≥0 words and output ≥1 token (got %d, %d, %d, %d, %d)",
			p.Prefixes, p.PrefixWords, p.Rounds, p.TailWords, p.Output)
	}
	return nil
}

// NewSession implements Workload.
func (p *PrefixReuse) NewSession(i, _ int) Session {
	round, pos := i/p.Prefixes, i%p.Prefixes
	prefix := newRNG(p.Seed, 6, uint64(round)).perm(p.Prefixes)[pos]
	var sb strings.Builder
	sb.Grow((p.PrefixWords + p.TailWords) * 7)
	appendWords(&sb, newRNG(p.Seed, 7, uint64(prefix)), p.PrefixWords)
	appendWords(&sb, newRNG(p.Seed, 8, uint64(i)), p.TailWords)
	req := &Request{Endpoint: p.Endpoint, MaxTokens: p.Output, IgnoreEOS: p.IgnoreEOS, InputTokens: p.PrefixWords + p.TailWords,
		Tag: Tag{Session: i, Prefix: prefix, Round: round}}
	if round > 0 {
		req.OverlapTokens = p.PrefixWords
	}
	if p.Endpoint == Completions {
		req.Prompt = sb.String()
	} else {
		req.Messages = []Message{{Role: "user", Content: sb.String()}}
	}
	return &oneShot{req: req}
}

// HitCriteria says when a re-request counts as a prefix-cache hit.
type HitCriteria struct {
	// TTFTFrac: a hit's TTFT is below this fraction of the prefix's first
	// request's TTFT (the seed used 0.6).
	TTFTFrac float64 `json:"ttft_frac"`
	// CachedFrac: a hit's cached_tokens is at least this fraction of its
	// prompt tokens. A miss still caches a shared chat-template header of
	// a block or so; a hit caches the whole prefix (~98% here).
	CachedFrac float64 `json:"cached_frac"`
}

// DefaultHitCriteria returns the seed's TTFT rule and a cached_tokens
// rule of half the prompt.
func DefaultHitCriteria() HitCriteria { return HitCriteria{TTFTFrac: 0.6, CachedFrac: 0.5} }

// HitRow is one (label, run)'s hit count.
type HitRow struct {
	Label      string `json:"label"`
	Run        int    `json:"run"`
	Rerequests int    `json:"rerequests"`
	TTFTHits   int    `json:"ttft_hits"`
	CachedHits int    `json:"cached_hits"`
	// CachedReported is false when the server never reported
	// cached_tokens; CachedHits then means nothing.
	CachedReported bool `json:"cached_reported"`
	Errors         int  `json:"errors"`
	// Median TTFTs of first requests, and of re-requests judged hits and
	// misses by TTFT.
	FirstTTFTMs float64 `json:"first_ttft_ms"`
	HitTTFTMs   float64 `json:"hit_ttft_ms"`
	MissTTFTMs  float64 `json:"miss_ttft_ms"`
	// Workers counts the distinct workers each prefix was served by,
	// summed over prefixes (Prefixes when every prefix stayed on one).
	Workers int `json:"prefix_worker_spread"`
	// Error is set when the run could not take place (a router mode the
	// server does not support).
	Error string `json:"error,omitempty"`
}

func (h HitRow) String() string {
	if h.Error != "" {
		return "error: " + h.Error
	}
	return fmt.Sprintf("%d/%d", h.TTFTHits, h.Rerequests)
}

// markHits judges every prefix-reuse re-request of the records (setting
// HitTTFT and HitCached) and returns a row per (label, run), in order of
// first appearance.
func markHits(recs []Record, c HitCriteria) []HitRow {
	type key struct {
		label string
		run   int
	}
	type pkey struct {
		key
		prefix int
	}
	first := map[pkey]float64{}
	workers := map[pkey]map[string]bool{}
	var order []key
	rows := map[key]*HitRow{}
	firsts, hitT, missT := map[key][]float64{}, map[key][]float64{}, map[key][]float64{}
	for i := range recs {
		r := &recs[i]
		if r.Prefix < 0 {
			continue
		}
		k := key{r.Label, r.Run}
		if rows[k] == nil {
			rows[k] = &HitRow{Label: r.Label, Run: r.Run}
			order = append(order, k)
		}
		if r.CachedTokens >= 0 {
			rows[k].CachedReported = true
		}
		pk := pkey{k, r.Prefix}
		if r.OK() && r.Worker != "" {
			if workers[pk] == nil {
				workers[pk] = map[string]bool{}
			}
			workers[pk][r.Worker] = true
		}
		if r.Round == 0 && r.OK() && r.TTFTMs > 0 {
			first[pk] = r.TTFTMs
			firsts[k] = append(firsts[k], r.TTFTMs)
		}
	}
	for i := range recs {
		r := &recs[i]
		if r.Prefix < 0 || r.Round < 1 {
			continue
		}
		k := key{r.Label, r.Run}
		row := rows[k]
		row.Rerequests++
		base, hasBase := first[pkey{k, r.Prefix}]
		ttftHit := r.OK() && hasBase && r.TTFTMs >= 0 && r.TTFTMs < c.TTFTFrac*base
		cachedHit := r.OK() && r.CachedTokens >= 0 && r.InputTokens > 0 && float64(r.CachedTokens) >= c.CachedFrac*float64(r.InputTokens)
		r.HitTTFT, r.HitCached = &ttftHit, &cachedHit
		switch {
		case !r.OK():
			row.Errors++
		case ttftHit:
			row.TTFTHits++
			hitT[k] = append(hitT[k], r.TTFTMs)
		default:
			missT[k] = append(missT[k], r.TTFTMs)
		}
		if cachedHit {
			row.CachedHits++
		}
	}
	for pk, ws := range workers {
		rows[pk.key].Workers += len(ws)
	}
	out := make([]HitRow, 0, len(order))
	for _, k := range order {
		row := rows[k]
		row.FirstTTFTMs, row.HitTTFTMs, row.MissTTFTMs = round3(Median(firsts[k])), round3(Median(hitT[k])), round3(Median(missT[k]))
		out = append(out, *row)
	}
	return out
}

// ServerStarter starts a Tandem whose router runs mode and returns its
// base URL and how to stop it. The CLI provides one built on serve.Start,
// so this package stays a pure HTTP client.
type ServerStarter func(ctx context.Context, mode string) (url string, stop func(), err error)

// RunModes runs the prefix-reuse workload once per (run, mode), each
// against a fresh server from start, so every run begins with cold
// caches. Runs are the outer loop: a drift in the machine's speed then
// touches every mode alike. A mode whose server fails to start yields a
// Result with Error set and the experiment goes on.
func RunModes(ctx context.Context, wl PrefixReuse, o Options, modes []string, runs int, start ServerStarter) ([]*Result, error) {
	if start == nil {
		return nil, fmt.Errorf("no server starter: the per-mode table needs a way to start servers")
	}
	if len(modes) == 0 {
		return nil, fmt.Errorf("no router modes given")
	}
	var out []*Result
	runs = max(runs, 1)
	for run := 1; run <= runs; run++ {
		for i, mode := range modes {
			if ctx.Err() != nil {
				return out, nil
			}
			o := o
			o.ProgressPrefix = fmt.Sprintf("[run %d/%d: mode %s, trial %d/%d] ", (run-1)*len(modes)+i+1, runs*len(modes), mode, run, runs)
			res, err := runMode(ctx, wl, o, mode, run, start)
			if err != nil {
				res = &Result{Scenario: wl.Name(), Run: run, Labels: []string{mode}, Error: err.Error()}
			}
			out = append(out, res)
		}
	}
	return out, nil
}

func runMode(ctx context.Context, wl PrefixReuse, o Options, mode string, run int, start ServerStarter) (*Result, error) {
	url, stop, err := start(ctx, mode)
	if err != nil {
		return nil, fmt.Errorf("starting a server in mode %s: %w", mode, err)
	}
	defer stop()
	model := ""
	if len(o.Targets) > 0 {
		model = o.Targets[0].Model
	}
	o.Targets = []Target{{Label: mode, URL: url, Model: model}}
	o.Run = run
	wl.Seed += uint64(run - 1)
	t0 := time.Now()
	res, err := Run(ctx, &wl, o)
	if err != nil {
		return nil, fmt.Errorf("mode %s run %d after %s: %w", mode, run, time.Since(t0).Round(time.Millisecond), err)
	}
	return res, nil
}
