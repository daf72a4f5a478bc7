package bench

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

func synth(in, out int) *Synthetic {
	return &Synthetic{Endpoint: Chat, Input: FixedDist(in), Output: FixedDist(out), IgnoreEOS: true, Seed: 1}
}

func mustRun(t *testing.T, wl Workload, o Options) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Run(ctx, wl, o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func byLabel(res *Result) map[string][]Record {
	out := map[string][]Record{}
	for _, r := range res.Records {
		out[r.Label] = append(out[r.Label], r)
	}
	return out
}

func TestClosedLoopMeasuresStreams(t *testing.T) {
	for _, tc := range []struct {
		name     string
		endpoint Endpoint
		noStream bool
	}{
		{"chat stream", Chat, false},
		{"completions stream", Completions, false},
		{"chat whole", Chat, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeServer{TTFT: 5 * time.Millisecond, TokenGap: 2 * time.Millisecond, Worker: "w1"}
			srv := f.start(t)
			wl := synth(20, 6)
			wl.Endpoint = tc.endpoint
			res := mustRun(t, wl, Options{Targets: []Target{{URL: srv.URL + "/v1/"}}, Concurrency: 3, Requests: 12,
				NoStream: tc.noStream, WorkerHeader: DefaultWorkerHeader})
			if len(res.Records) != 12 || res.Models[0] != "fake-model" {
				t.Fatalf("%d records, model %q", len(res.Records), res.Models[0])
			}
			for _, r := range res.Records {
				if !r.OK() || r.Worker != "w1" || r.OutputTokens != 6 || r.InputTokens != 20 || r.CachedTokens != 0 || !r.UsageReported {
					t.Fatalf("record %+v", r)
				}
				if tc.noStream {
					if r.TTFTMs != -1 || len(r.ITLMs) != 0 {
						t.Fatalf("non-streamed record has TTFT/ITL: %+v", r)
					}
					continue
				}
				// The server sleeps 5 ms before the first token and 2 ms
				// before each of the other five, so TTFT ≥ 5 and E2E ≥ 15
				// hold however late the client reads. The gaps do not have
				// a lower bound: a client that reads the first chunk late
				// (a loaded machine under -race) sees it arrive with the
				// next, with gaps summing to less than the sleeps. They must
				// span first to last token: E2E − TTFT, no more.
				if r.TTFTMs < 5 || len(r.ITLMs) != 5 || r.E2EMs < 15 {
					t.Fatalf("timings %+v", r)
				}
				sum := 0.0
				for _, g := range r.ITLMs {
					if g < 0 {
						t.Fatalf("negative gap in %v", r.ITLMs)
					}
					sum += g
				}
				if sum > r.E2EMs-r.TTFTMs+0.01 {
					t.Fatalf("gaps %v sum to %.2f ms, more than E2E %.2f − TTFT %.2f", r.ITLMs, sum, r.E2EMs, r.TTFTMs)
				}
			}
			if got := f.Bodies[0]["max_tokens"]; got != 6.0 {
				t.Fatalf("max_tokens %v", got)
			}
		})
	}
}

// TestErrorAccounting: a target that answers 500s, drops connections, cuts
// streams and sends error events has every failure counted by kind, and
// the run completes all its requests.
func TestErrorAccounting(t *testing.T) {
	f := &fakeServer{TokenGap: time.Millisecond, Fail500: 3, Drop: 5, Cut: 7, ErrEvent: 11}
	srv := f.start(t)
	res := mustRun(t, synth(10, 6), Options{Targets: []Target{{URL: srv.URL, Model: "m"}}, Concurrency: 1, Requests: 40})
	if len(res.Records) != 40 {
		t.Fatalf("%d records, want 40: the run stopped early", len(res.Records))
	}
	kinds := map[string]int{}
	for _, r := range res.Records {
		kinds[r.ErrorKind]++
	}
	// With concurrency 1, request i is the server's i-th: 500 on i%3==2,
	// drop on i%5==4, cut on i%7==6, error event on i%11==10, first match
	// wins in that order.
	want := map[string]int{}
	for i := range 40 {
		switch {
		case i%3 == 2:
			want[ErrHTTP]++
		case i%5 == 4:
			want[ErrConnect]++
		case i%7 == 6:
			want[ErrStream]++
		case i%11 == 10:
			want[ErrServer]++
		default:
			want[""]++
		}
	}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("kind %q: %d, want %d (all: %v)", k, kinds[k], n, kinds)
		}
	}
	rep := NewReport("synthetic", []*Result{res}, DefaultHitCriteria())
	if s := rep.Summaries[0]; s.Errors != 40-want[""] || s.OK != want[""] {
		t.Errorf("summary ok %d errors %d", s.OK, s.Errors)
	}
}

// TestOpenLoopCountsFromSchedule: the coordinated-omission rule. The tool
// may send only one request at a time (MaxInFlight 1) to a server that
// takes 20 ms each, at 100 arrivals/s: requests leave later and later, and
// their latency must include that wait, not restart at the actual send.
func TestOpenLoopCountsFromSchedule(t *testing.T) {
	f := &fakeServer{TTFT: 20 * time.Millisecond}
	srv := f.start(t)
	res := mustRun(t, synth(5, 1), Options{Targets: []Target{{URL: srv.URL, Model: "m"}}, Rate: 100, Requests: 40, MaxInFlight: 1, Seed: 4})
	if len(res.Records) != 40 {
		t.Fatalf("%d records", len(res.Records))
	}
	var maxE2E, maxLagPlusService float64
	for _, r := range res.Records {
		if !r.OK() {
			t.Fatalf("error %s", r.Error)
		}
		if r.TTFTMs < r.SendLagMs {
			t.Fatalf("TTFT %.1f ms below the send lag %.1f ms: latency restarted at the send", r.TTFTMs, r.SendLagMs)
		}
		maxE2E = max(maxE2E, r.E2EMs)
		maxLagPlusService = max(maxLagPlusService, r.SendLagMs)
	}
	// 40 × 20 ms of service against 40 arrivals over ~0.4 s: the last
	// requests wait ~0.4 s.
	if maxE2E < 200 || maxLagPlusService < 150 {
		t.Fatalf("max E2E %.0f ms, max send lag %.0f ms: the backlog is not in the latency", maxE2E, maxLagPlusService)
	}
}

func TestOpenLoopPoissonRate(t *testing.T) {
	f := &fakeServer{}
	srv := f.start(t)
	res := mustRun(t, synth(5, 1), Options{Targets: []Target{{URL: srv.URL, Model: "m"}}, Rate: 400, Duration: 500 * time.Millisecond, Seed: 9})
	n := len(res.Records)
	if n < 140 || n > 270 { // 200 expected; Poisson sd ≈ 14
		t.Fatalf("%d arrivals in 0.5 s at 400/s", n)
	}
	last := 0.0
	for _, r := range res.Records {
		last = max(last, r.ScheduledMs)
	}
	if last > 500 {
		t.Fatalf("an arrival scheduled at %.0f ms, after the 500 ms duration", last)
	}
}

// TestABInterleaved: two targets in one run get the same requests in
// alternating order, and the ratio reflects their difference.
func TestABInterleaved(t *testing.T) {
	fa := &fakeServer{TokenGap: 2 * time.Millisecond}
	fb := &fakeServer{TokenGap: 6 * time.Millisecond}
	a, b := fa.start(t), fb.start(t)
	res := mustRun(t, synth(30, 8), Options{Targets: []Target{{Label: "fast", URL: a.URL}, {Label: "slow", URL: b.URL}}, Concurrency: 1, Requests: 10})
	recs := byLabel(res)
	if len(recs["fast"]) != 10 || len(recs["slow"]) != 10 {
		t.Fatalf("records %d/%d", len(recs["fast"]), len(recs["slow"]))
	}
	// The same prompts, in the same order per target.
	for i := range 10 {
		if fa.Bodies[i]["messages"].([]any)[0].(map[string]any)["content"] != fb.Bodies[i]["messages"].([]any)[0].(map[string]any)["content"] {
			t.Fatalf("request %d differs between targets", i)
		}
	}
	// Alternating: session i goes first to target i%2.
	for _, r := range res.Records {
		if r.Session%2 == 0 && r.Label == "fast" || r.Session%2 == 1 && r.Label == "slow" {
			continue
		}
		var other Record
		for _, o := range res.Records {
			if o.Session == r.Session && o.Label != r.Label {
				other = o
			}
		}
		if other.Seq > r.Seq {
			t.Fatalf("session %d: %s went first, want the rotation", r.Session, r.Label)
		}
	}
	rep := NewReport("synthetic", []*Result{res}, DefaultHitCriteria())
	var itl Ratio
	for _, x := range rep.Ratios {
		if x.Metric == "itl_p50_ms" {
			itl = x
		}
	}
	if itl.Ratio < 2 || itl.Ratio > 4.5 || itl.Base != "fast" || itl.Other != "slow" {
		t.Fatalf("ITL ratio %+v, want ≈3", itl)
	}
	var sb strings.Builder
	if err := rep.WriteText(&sb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "slow/fast") {
		t.Fatalf("no ratio column:\n%s", sb.String())
	}
}

func TestMultiTurnCarriesHistory(t *testing.T) {
	f := &fakeServer{}
	srv := f.start(t)
	m := &MultiTurn{Turns: FixedDist(3), FirstInput: FixedDist(20), Input: FixedDist(5), Output: FixedDist(4), SystemWords: 10, Seed: 2, N: 4}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	res := mustRun(t, m, Options{Targets: []Target{{URL: srv.URL, Model: "m"}}, Concurrency: 2})
	if len(res.Records) != 12 {
		t.Fatalf("%d records, want 4 conversations × 3 turns", len(res.Records))
	}
	for _, body := range f.Bodies {
		msgs := body["messages"].([]any)
		if len(msgs)%2 != 0 || msgs[0].(map[string]any)["role"] != "system" {
			t.Fatalf("messages %v", msgs)
		}
		for k := 2; k < len(msgs); k += 2 {
			if c := msgs[k].(map[string]any)["content"].(string); !strings.HasPrefix(strings.TrimSpace(c), "tok0") {
				t.Fatalf("assistant turn %q is not the previous reply", c)
			}
		}
	}
	turns := map[int]int{}
	for _, r := range res.Records {
		turns[r.Turn]++
	}
	if turns[0] != 4 || turns[1] != 4 || turns[2] != 4 {
		t.Fatalf("turns %v", turns)
	}
}

func TestWarmupAndOptionErrors(t *testing.T) {
	f := &fakeServer{}
	srv := f.start(t)
	res := mustRun(t, synth(5, 1), Options{Targets: []Target{{URL: srv.URL, Model: "m"}}, Requests: 5, Warmup: 3})
	if len(res.Records) != 5 || f.n.Load() != 8 {
		t.Fatalf("%d records, %d served; want 5 and 8", len(res.Records), f.n.Load())
	}
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"no target", Options{Requests: 1}},
		{"rate and concurrency", Options{Targets: []Target{{URL: srv.URL}}, Rate: 1, Concurrency: 2, Requests: 1}},
		{"unbounded", Options{Targets: []Target{{URL: srv.URL}}}},
		{"bad url", Options{Targets: []Target{{URL: "localhost:80"}}, Requests: 1}},
		{"no models", Options{Targets: []Target{{URL: "http://127.0.0.1:1"}}, Requests: 1}},
	} {
		if _, err := Run(context.Background(), synth(5, 1), tc.o); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func TestCancelStopsRun(t *testing.T) {
	f := &fakeServer{TTFT: 30 * time.Millisecond}
	srv := f.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, synth(5, 1), Options{Targets: []Target{{URL: srv.URL, Model: "m"}}, Concurrency: 2, Requests: 1000})
	if err != nil {
		t.Fatal(err)
	}
	// 1000 requests of 30 ms at concurrency 2 take 15 s; a cancel that
	// works stops the run well inside 10 s even on a loaded machine.
	if !res.Interrupted || time.Since(start) > 10*time.Second || len(res.Records) >= 1000 {
		t.Fatalf("interrupted=%v after %v with %d records", res.Interrupted, time.Since(start), len(res.Records))
	}
	for _, r := range res.Records {
		if !r.OK() {
			t.Fatalf("a request cut by the user's cancel was recorded as an error: %s", r.Error)
		}
	}
}

// delayProxy forwards to target after sleeping d: a stand-in for a
// frontend with a known cost.
func delayProxy(t *testing.T, target string, d time.Duration) *httptest.Server {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(io.Discard, "", 0)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(d)
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func TestFrontendOverheadFindsAddedLatency(t *testing.T) {
	f := &fakeServer{TTFT: 2 * time.Millisecond, TokenGap: time.Millisecond}
	direct := f.start(t)
	front := delayProxy(t, direct.URL, 8*time.Millisecond)
	wl := Synthetic{Endpoint: Chat, Input: FixedDist(50), Output: FixedDist(4), Seed: 1}
	runs, err := RunOverhead(context.Background(), wl, Options{Targets: []Target{{Label: "direct", URL: direct.URL}, {Label: "frontend", URL: front.URL}},
		Requests: 30}, []int{1, 4})
	if err != nil {
		t.Fatal(err)
	}
	rep := NewReport(ScenarioFrontendOverhead, runs, DefaultHitCriteria())
	if len(rep.Overhead) != 2 || rep.Overhead[0].Concurrency != 1 || rep.Overhead[1].Concurrency != 4 {
		t.Fatalf("overhead rows %+v", rep.Overhead)
	}
	// A difference of wall-clock medians: generous bounds on a shared
	// machine that still say the proxy's 8 ms was found, not zero.
	for _, o := range rep.Overhead {
		if o.AddedTTFTP50 < 4 || o.AddedTTFTP50 > 40 {
			t.Errorf("c=%d: added TTFT p50 %.2f ms, want ≈8", o.Concurrency, o.AddedTTFTP50)
		}
	}
	// Salted: the two targets never got the same prompt.
	seen := map[string]bool{}
	for _, b := range f.Bodies {
		c := b["messages"].([]any)[0].(map[string]any)["content"].(string)
		if seen[c] {
			t.Fatal("a prompt was sent twice: targets are not salted")
		}
		seen[c] = true
	}
	if _, err := RunOverhead(context.Background(), wl, Options{Targets: []Target{{URL: direct.URL}}, Requests: 1}, nil); err == nil {
		t.Error("one target accepted")
	}
}

// fakeStarter starts a fake server per mode: "cache" remembers prefixes,
// "nocache" does not, anything else fails like an unsupported mode.
func fakeStarter(t *testing.T) (ServerStarter, *sync.Map) {
	var started sync.Map
	return func(_ context.Context, mode string) (string, func(), error) {
		var f *fakeServer
		// 150 ms, not less: a TTFT judgement compares a request with its
		// prefix's first, and on a loaded 2-core machine under the race
		// detector one request can be delayed by a hundred milliseconds.
		switch mode {
		case "cache":
			f = &fakeServer{TTFT: 150 * time.Millisecond, HitTTFT: 2 * time.Millisecond, CacheKey: 200, Worker: "w0"}
		case "nocache":
			f = &fakeServer{TTFT: 150 * time.Millisecond, Worker: "w1"}
		default:
			return "", nil, errors.New(`unknown router mode "` + mode + `"`)
		}
		s := f.start(t)
		n, _ := started.LoadOrStore(mode, new(int))
		*n.(*int)++
		return s.URL, s.Close, nil
	}, &started
}

// TestMarkHitsFixedRecords checks the hit judgement exactly, on records
// whose TTFTs are fixed rather than measured.
func TestMarkHitsFixedRecords(t *testing.T) {
	rec := func(round int, ttft float64, cached int) Record {
		return Record{Label: "a", Prefix: 0, Round: round, TTFTMs: ttft, CachedTokens: cached, InputTokens: 100, Worker: "w"}
	}
	recs := []Record{
		rec(0, 100, 0),
		rec(1, 59.9, 50), // both hits: under 60% of the first, half cached
		rec(2, 60, 49),   // neither: exactly 60% is not under it
		{Label: "a", Prefix: 0, Round: 3, Error: "boom", CachedTokens: -1},
	}
	rows := markHits(recs, DefaultHitCriteria())
	if len(rows) != 1 {
		t.Fatalf("rows %+v", rows)
	}
	h := rows[0]
	if h.Rerequests != 3 || h.TTFTHits != 1 || h.CachedHits != 1 || h.Errors != 1 || !h.CachedReported || h.Workers != 1 {
		t.Errorf("row %+v", h)
	}
	if !*recs[1].HitTTFT || !*recs[1].HitCached || *recs[2].HitTTFT || *recs[2].HitCached {
		t.Errorf("judgements: %v %v %v %v", *recs[1].HitTTFT, *recs[1].HitCached, *recs[2].HitTTFT, *recs[2].HitCached)
	}
}

func TestRunModesHitTable(t *testing.T) {
	start, started := fakeStarter(t)
	wl := PrefixReuse{Prefixes: 4, PrefixWords: 100, Rounds: 3, TailWords: 5, Output: 2, Endpoint: Chat, Seed: 1}
	runs, err := RunModes(context.Background(), wl, Options{Concurrency: 1, WorkerHeader: DefaultWorkerHeader}, []string{"cache", "nocache", "kv-approx"}, 2, start)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 6 {
		t.Fatalf("%d runs, want 3 modes × 2", len(runs))
	}
	if n, _ := started.Load("cache"); *n.(*int) != 2 {
		t.Fatalf("cache mode started %d servers, want a fresh one per run", *n.(*int))
	}
	rep := NewReport(ScenarioPrefixReuse, runs, DefaultHitCriteria())
	got := map[string][]HitRow{}
	for _, h := range rep.Hits {
		got[h.Label] = append(got[h.Label], h)
	}
	// The TTFT judgement reads wall-clock TTFTs, so it is statistical: one
	// re-request of eight may be misjudged when the machine stalls it (a
	// hit slowed past 60% of its first, or, without a cache, a first
	// slowed by two thirds). cached_tokens is exact and is checked exactly;
	// the classifier itself is checked exactly on fixed records elsewhere.
	for _, h := range got["cache"] {
		if h.Rerequests != 8 || h.TTFTHits < 7 || h.CachedHits != 8 || !h.CachedReported || h.Workers != 4 {
			t.Errorf("cache: %+v", h)
		}
	}
	for _, h := range got["nocache"] {
		if h.Rerequests != 8 || h.TTFTHits > 1 || h.CachedHits != 0 {
			t.Errorf("nocache: %+v", h)
		}
	}
	if len(got["kv-approx"]) != 2 || !strings.Contains(got["kv-approx"][0].Error, "unknown router mode") {
		t.Errorf("kv-approx: %+v", got["kv-approx"])
	}
	var sb strings.Builder
	if err := rep.WriteText(&sb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"8/8 8/8", "0/8 0/8", "kv-approx (run 1, 2): starting a server in mode kv-approx: unknown router mode"} {
		if want == "0/8 0/8" && got["nocache"][0].TTFTHits+got["nocache"][1].TTFTHits > 0 {
			continue
		}
		if want == "8/8 8/8" && got["cache"][0].TTFTHits+got["cache"][1].TTFTHits < 16 {
			continue
		}
		if !strings.Contains(sb.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, sb.String())
		}
	}
}
