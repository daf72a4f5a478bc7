package bench

import (
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/internal/sharedfiles"
	"github.com/tandemllm/tandem/tokenizer"
)

// mooncakeTrace is the path of a Mooncake trace in the shared fixture
// directory, found by internal/sharedfiles (TANDEM_SHARED or a "shared"
// directory beside the checkout) rather than a path relative to the package,
// which breaks when the checkout lies elsewhere.
func mooncakeTrace(t *testing.T, name string) string {
	t.Helper()
	p, err := sharedfiles.Path("traces", "mooncake", name)
	if err != nil {
		t.Skipf("trace not available: %v", err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("trace not available: %v", err)
	}
	return p
}

func TestParseDist(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Dist
		wantErr bool
	}{
		{"512", Dist{Kind: Fixed, A: 512}, false},
		{"fixed:128", Dist{Kind: Fixed, A: 128}, false},
		{"uniform:10,20", Dist{Kind: Uniform, A: 10, B: 20}, false},
		{"normal:512, 64", Dist{Kind: Normal, A: 512, B: 64}, false},
		{"LogNormal:300,0.8", Dist{Kind: LogNormal, A: 300, B: 0.8}, false},
		{"uniform:20,10", Dist{}, true},
		{"normal:5", Dist{}, true},
		{"zipf:1,2", Dist{}, true},
		{"zipf:1.2,64,4096", Dist{Kind: Zipf, A: 1.2, B: 64, C: 4096}, false},
		{"zipf:0,1,10", Dist{}, true},
		{"zipf:1,10,5", Dist{}, true},
		{"fixed:0", Dist{}, true},
		{"x", Dist{}, true},
	} {
		got, err := ParseDist(tc.in)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
			t.Errorf("ParseDist(%q) = %+v, %v; want %+v, err %v", tc.in, got, err, tc.want, tc.wantErr)
		}
		if err == nil {
			if back, err := ParseDist(got.String()); err != nil || back != got {
				t.Errorf("round trip of %q: %+v %v", tc.in, back, err)
			}
		}
	}
}

func TestDistSamples(t *testing.T) {
	for _, tc := range []struct {
		d        Dist
		lo, hi   int
		mean, to float64
	}{
		{FixedDist(7), 7, 7, 7, 0},
		{Dist{Kind: Uniform, A: 10, B: 20}, 10, 20, 15, 0.5},
		{Dist{Kind: Normal, A: 500, B: 50}, 1, 1 << 30, 500, 10},
		{Dist{Kind: LogNormal, A: 500, B: 0.5}, 1, 1 << 30, 500, 25},
		{Dist{Kind: Zipf, A: 1.2, B: 64, C: 4096}, 64, 4096, Dist{Kind: Zipf, A: 1.2, B: 64, C: 4096}.Mean(), 15},
		{Dist{Kind: Zipf, A: 1, B: 1, C: 1000}, 1, 1000, Dist{Kind: Zipf, A: 1, B: 1, C: 1000}.Mean(), 8}, // sd 221: 8 is 5 standard errors
		{Dist{Kind: Zipf, A: 0.5, B: 10, C: 20}, 10, 20, Dist{Kind: Zipf, A: 0.5, B: 10, C: 20}.Mean(), 0.2},
	} {
		r := newRNG(1)
		sum := 0
		const n = 20000
		for range n {
			v := tc.d.sample(r)
			if v < tc.lo || v > tc.hi {
				t.Fatalf("%v: sample %d outside [%d, %d]", tc.d, v, tc.lo, tc.hi)
			}
			sum += v
		}
		if m := float64(sum) / n; m < tc.mean-tc.to || m > tc.mean+tc.to {
			t.Errorf("%v: mean %.1f, want %.1f±%.1f", tc.d, m, tc.mean, tc.to)
		}
	}
}

// TestZipfPMF checks the rejection-inversion sampler against the exact
// probabilities of a small Zipf law.
func TestZipfPMF(t *testing.T) {
	for _, s := range []float64{0.7, 1, 1.5, 3} {
		const n, draws = 8, 200000
		r := newRNG(7)
		var counts [n + 1]int
		for range draws {
			counts[zipfRank(r, s, n)]++
		}
		norm := 0.0
		for k := 1; k <= n; k++ {
			norm += math.Pow(float64(k), -s)
		}
		for k := 1; k <= n; k++ {
			p := math.Pow(float64(k), -s) / norm
			got := float64(counts[k]) / draws
			// 5 standard errors of a binomial share.
			if tol := 5 * math.Sqrt(p*(1-p)/draws); math.Abs(got-p) > tol {
				t.Errorf("s=%v: P(%d) = %.4f, want %.4f ± %.4f", s, k, got, p, tol)
			}
		}
	}
}

// TestWordsAreSingleTokens: prompt sizes in words equal tokens on the
// built-in model, which is what makes word counts comparable to the seed's.
func TestWordsAreSingleTokens(t *testing.T) {
	m, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	if numWords*wordWidth != len(wordTable) {
		t.Fatalf("word table is not a whole number of %d-byte entries", wordWidth)
	}
	for i := range numWords {
		w := word(i)
		if w == "" || strings.Contains(w, " ") {
			t.Fatalf("entry %d is %q", i, w)
		}
		if n := len(m.Tokenizer.Encode(" " + w)); n != 1 {
			t.Errorf("%q is %d tokens", " "+w, n)
		}
	}
	text := words(newRNG(3), 1500)
	if n := len(m.Tokenizer.Encode(text)); n != 1500 {
		t.Errorf("1500 words are %d tokens", n)
	}
}

func firstRequest(t *testing.T, wl Workload, i, target int) *Request {
	t.Helper()
	req, _, ok := wl.NewSession(i, target).Next(nil)
	if !ok {
		t.Fatalf("session %d is empty", i)
	}
	return req
}

func TestSyntheticPrompts(t *testing.T) {
	for _, tc := range []struct {
		name string
		wl   Synthetic
	}{
		{"chat words", Synthetic{Endpoint: Chat, Input: FixedDist(100), Output: FixedDist(8), PrefixRatio: 0.5, Seed: 3}},
		{"completion ids", Synthetic{Endpoint: Completions, TokenIDs: true, Input: FixedDist(100), Output: FixedDist(8), PrefixRatio: 0.5, Seed: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.wl.Validate(); err != nil {
				t.Fatal(err)
			}
			a, b := firstRequest(t, &tc.wl, 0, 0), firstRequest(t, &tc.wl, 1, 0)
			again := firstRequest(t, &tc.wl, 0, 1)
			toks := func(r *Request) []string {
				if r.PromptIDs != nil {
					var s []string
					for _, id := range r.PromptIDs {
						s = append(s, string(rune(id)))
					}
					return s
				}
				return strings.Fields(r.Messages[0].Content)
			}
			ta, tb := toks(a), toks(b)
			if len(ta) != 100 || len(tb) != 100 {
				t.Fatalf("lengths %d %d, want 100", len(ta), len(tb))
			}
			if !slices.Equal(ta[:50], tb[:50]) {
				t.Error("the shared half differs between requests")
			}
			if slices.Equal(ta[50:], tb[50:]) {
				t.Error("the private halves are equal")
			}
			if !slices.Equal(ta, toks(again)) {
				t.Error("the same session differs between targets without salt")
			}
			salted := tc.wl
			salted.SaltTargets = true
			if slices.Equal(toks(firstRequest(t, &salted, 0, 0))[50:], toks(firstRequest(t, &salted, 0, 1))[50:]) {
				t.Error("salted targets got the same private part")
			}
		})
	}
}

func TestPrefixReuseSchedule(t *testing.T) {
	p := DefaultPrefixReuse()
	if p.Sessions() != 72 {
		t.Fatalf("%d sessions, want 72", p.Sessions())
	}
	seen := map[int]int{}
	prefixText := map[int]string{}
	for i := range p.Sessions() {
		req := firstRequest(t, &p, i, 0)
		if req.Tag.Round != i/12 {
			t.Fatalf("session %d in round %d", i, req.Tag.Round)
		}
		seen[req.Tag.Prefix]++
		ws := strings.Fields(req.Messages[0].Content)
		if len(ws) != 1524 {
			t.Fatalf("prompt of %d words, want 1524", len(ws))
		}
		pre := strings.Join(ws[:1500], " ")
		if old, ok := prefixText[req.Tag.Prefix]; ok && old != pre {
			t.Fatalf("prefix %d changed between rounds", req.Tag.Prefix)
		}
		prefixText[req.Tag.Prefix] = pre
	}
	for k := range 12 {
		if seen[k] != 6 {
			t.Fatalf("prefix %d sent %d times, want 6", k, seen[k])
		}
	}
	if prefixText[0][:40] == prefixText[1][:40] {
		t.Fatal("prefixes share their start")
	}
}

func TestTracePrompts(t *testing.T) {
	es := []TraceEntry{
		{Timestamp: 0, InputLength: 1100, OutputLength: 5, HashIDs: []int64{0, 1, 2}},
		{Timestamp: 10, InputLength: 700, OutputLength: 5, HashIDs: []int64{0, 3}},
	}
	tr := &Trace{Entries: es, BlockSize: 512, Prompt: TraceIDs, Seed: 1}
	a, b := firstRequest(t, tr, 0, 0), firstRequest(t, tr, 1, 0)
	if len(a.PromptIDs) != 1100 || len(b.PromptIDs) != 700 || a.Endpoint != Completions {
		t.Fatalf("lengths %d %d", len(a.PromptIDs), len(b.PromptIDs))
	}
	if !slices.Equal(a.PromptIDs[:512], b.PromptIDs[:512]) {
		t.Error("equal hash id 0 gave different blocks")
	}
	if slices.Equal(a.PromptIDs[512:700], b.PromptIDs[512:700]) {
		t.Error("different hash ids gave equal blocks")
	}
	for _, id := range a.PromptIDs {
		if id < 1000 || id >= 30000 {
			t.Fatalf("token id %d outside the default vocabulary range", id)
		}
	}
	if tr.Arrival(1).Milliseconds() != 10 {
		t.Errorf("arrival %v", tr.Arrival(1))
	}
	tw := &Trace{Entries: es, BlockSize: 512, Prompt: TraceWords, Seed: 1, MaxInput: 600}
	wa, wb := strings.Fields(firstRequest(t, tw, 0, 0).Prompt), strings.Fields(firstRequest(t, tw, 1, 0).Prompt)
	if len(wa) != 600 || !slices.Equal(wa[:512], wb[:512]) || slices.Equal(wa[512:], wb[512:]) {
		t.Errorf("word prompts: %d words; shared block equal=%v", len(wa), slices.Equal(wa[:512], wb[:512]))
	}
}

func TestLoadMooncakeTraces(t *testing.T) {
	for _, name := range []string{"conversation_trace.jsonl", "synthetic_trace.jsonl"} {
		path := mooncakeTrace(t, name)
		es, err := LoadMooncakeFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int{"conversation_trace.jsonl": 12031, "synthetic_trace.jsonl": 3993}[name]
		if len(es) != want {
			t.Errorf("%s: %d entries, want %d", name, len(es), want)
		}
		for i, e := range es[:200] {
			if len(e.HashIDs) != (e.InputLength+511)/512 {
				t.Fatalf("%s line %d: %d hash ids for %d tokens", name, i+1, len(e.HashIDs), e.InputLength)
			}
		}
	}
	if _, err := LoadMooncake(strings.NewReader(`{"timestamp": 0, "input_length": -1}`)); err == nil {
		t.Error("a negative input length was accepted")
	}
}

func TestHasContent(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{`{"choices":[{"delta":{"role":"assistant","content":""}}]}`, false},
		{`{"choices":[{"delta":{"content":"Hi"}}]}`, true},
		{`{"choices":[{"delta":{"content": "Hi"}}]}`, true},
		{`{"choices":[{"text":" a","finish_reason":null}]}`, true},
		{`{"choices":[{"text":"","finish_reason":"length"}]}`, false},
		{`{"choices":[{"delta":{"reasoning_content":"hmm"}}]}`, true},
		{`{"choices":[{"delta":{"content":null}}]}`, false},
		{`{"choices":[],"usage":{"prompt_tokens":3}}`, false},
	} {
		if got := hasContent([]byte(tc.in)); got != tc.want {
			t.Errorf("hasContent(%s) = %v", tc.in, got)
		}
	}
}

func TestReadStream(t *testing.T) {
	long := strings.Repeat("x", 10000)
	for _, tc := range []struct {
		name       string
		body       string
		chunks     int
		text       string
		kind       string
		out, cache int
	}{
		{"usage and done", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":3}}}\n\ndata: [DONE]\n\n",
			2, "ab", "", 2, 3},
		{"crlf, comments, events, no usage", ": keep-alive\r\nevent: message\r\ndata:{\"choices\":[{\"text\":\"a\"}]}\r\n\r\ndata: [DONE]\r\n\r\n", 1, "a", "", 1, -1},
		{"a line longer than the buffer", "data: {\"choices\":[{\"delta\":{\"content\":\"" + long + "\"}}]}\n\ndata: [DONE]\n\n", 1, long, "", 1, -1},
		{"cut before done", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n", 1, "a", ErrStream, 0, -1},
		{"error event", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"boom\"}}\n\ndata: [DONE]\n\n", 1, "a", ErrServer, 0, -1},
		{"garbage", "data: {not json \"usage\":{\n\n", 0, "", ErrDecode, 0, -1},
		{"usage null on every chunk", "data: {\"choices\":[{\"text\":\"a\"}],\"usage\":null}\n\ndata: [DONE]\n\n", 1, "a", "", 1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, needText := range []bool{false, true} {
				c := &client{needText: needText}
				rec := Record{CachedTokens: -1, TTFTMs: -1}
				var sb strings.Builder
				err := c.readStream(strings.NewReader(tc.body), &rec, time.Now(), &sb)
				if (err != nil) != (tc.kind != "") || rec.ErrorKind != tc.kind {
					t.Fatalf("needText=%v: err %v kind %q, want kind %q", needText, err, rec.ErrorKind, tc.kind)
				}
				if tc.kind != "" {
					continue
				}
				if len(rec.ITLMs) != tc.chunks-1 || (tc.chunks > 0) != (rec.TTFTMs >= 0) || rec.OutputTokens != tc.out || rec.CachedTokens != tc.cache {
					t.Fatalf("needText=%v: record %+v", needText, rec)
				}
				if needText && sb.String() != tc.text {
					t.Fatalf("text %q, want %q", sb.String(), tc.text)
				}
			}
		})
	}
}
