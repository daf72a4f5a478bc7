package upstream

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/engine/upstream/standin"
	"github.com/tandemllm/tandem/health"
)

func sglangMocker() mocker.Config {
	cfg := mocker.DefaultConfig()
	cfg.BlockSize, cfg.ContextLength, cfg.Instant = 16, 4096, true
	cfg.KVEvents.Enabled = false
	return cfg
}

// TestSGLang: /generate with input_ids through an SGLang look-alike, in
// both stream modes (cumulative output_ids by default, deltas with
// --stream-output): the ids arrive once each, cached_tokens on the first
// chunk, the finish reason's type mapped; each DP rank is its own engine
// and its requests land on that rank; a page size other than the block
// size is refused at startup.
func TestSGLang(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, streamOutput := range []bool{false, true} {
		srv, err := standin.StartSGLang(standin.SGLangOptions{Model: "qwen", Mocker: sglangMocker(), DPSize: 2, StreamOutput: streamOutput, EnableMetrics: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		info, err := ProbeSGLang(t.Context(), nil, srv.URL(), "")
		if err != nil || info.Ranks() != 2 || info.StreamOutput != streamOutput {
			t.Fatalf("server info %+v, %v", info, err)
		}
		prompt := make([]engine.Token, 100)
		for i := range prompt {
			prompt[i] = engine.Token(1000 + i)
		}
		for rank := range 2 {
			e, err := New(t.Context(), Config{URL: srv.URL(), API: APISGLang, BlockSize: 16, DPRank: rank, HealthInterval: -1, MetricsInterval: -1, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			if e.Info().Model != "qwen" || e.Info().ContextLength != 4096 {
				t.Fatalf("info %+v", e.Info())
			}
			var firsts []engine.Delta
			for range 2 {
				st, err := e.Generate(t.Context(), &engine.Request{ID: "r", Prompt: prompt, MaxTokens: 7, IgnoreEOS: true})
				if err != nil {
					t.Fatal(err)
				}
				d0, err := st.Recv()
				if err != nil {
					t.Fatal(err)
				}
				toks, last := drain(t, st)
				toks = append(d0.Tokens, toks...)
				if d0.Finish != engine.FinishNone {
					last = d0
				}
				if len(toks) != 7 || last.Finish != engine.FinishLength {
					t.Fatalf("stream output %v: %d tokens %v, finish %v", streamOutput, len(toks), toks, last.Finish)
				}
				firsts = append(firsts, d0)
			}
			if firsts[0].PromptTokens != 100 || firsts[0].CachedTokens != 0 || firsts[1].CachedTokens != 96 {
				t.Fatalf("rank %d: first deltas %+v (want cached 0 then 96)", rank, firsts)
			}
		}
		// Each rank saw its own two requests: the second hit its own cache.
		for r := range 2 {
			if st, _ := srv.Rank(r).CacheStats(t.Context()); st.Cached+st.Used == 0 {
				t.Fatalf("rank %d: nothing cached %+v", r, st)
			}
		}
		if _, err := New(t.Context(), Config{URL: srv.URL(), API: APISGLang, BlockSize: 32, HealthInterval: -1, Logger: quiet}); err == nil ||
			!strings.Contains(err.Error(), "page-size") {
			t.Fatalf("a page size mismatch: %v", err)
		}
		if _, err := New(t.Context(), Config{URL: srv.URL(), API: APISGLang, BlockSize: 16, DPRank: 2, HealthInterval: -1, Logger: quiet}); err == nil {
			t.Fatal("DP rank 2 of 2 accepted")
		}
	}
}

func TestOffsetEndpointPort(t *testing.T) {
	for _, c := range []struct {
		ep   string
		rank int
		want string
		bad  bool
	}{
		{"tcp://*:5557", 0, "tcp://*:5557", false},
		{"tcp://sglang-0:5557", 3, "tcp://sglang-0:5560", false},
		{"inproc://cache", 1, "inproc://cache_dp1", false},
		{"topic:w", 2, "topic:w", false},
		{"tcp://h:65535", 1, "", true},
		{"tcp://h:x", 1, "", true},
	} {
		got, err := OffsetEndpointPort(c.ep, c.rank)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("%s +%d: %q, %v", c.ep, c.rank, got, err)
		}
	}
}

// TestLoadScrape: each dialect's /metrics gives the server's load; SGLang
// is read per DP rank; llama-server without --metrics falls back to
// /slots; a server whose /metrics fails raises upstream_metrics_unavailable
// on /health, which clears when it answers again.
func TestLoadScrape(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Run("vllm", func(t *testing.T) {
		srv, err := standin.Start(standin.Options{Model: "m", Mocker: sglangMocker(), ReturnTokenIDs: true, GPUCacheMetric: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		e, err := New(t.Context(), Config{URL: srv.URL(), HealthInterval: -1, MetricsInterval: -1, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		if err := e.ScrapeNow(t.Context()); err != nil {
			t.Fatal(err)
		}
		if l, ok := e.Load(); !ok || l.KVUsage < 0 || l.Running != 0 {
			t.Fatalf("load %+v %v", l, ok)
		}
	})
	t.Run("sglang per rank", func(t *testing.T) {
		cfg := sglangMocker()
		cfg.Instant = false
		cfg.Timing = mocker.Qwen3_0_6BTiming()
		cfg.Speedup = 0.05 // slow: the requests are still running when scraped
		srv, err := standin.StartSGLang(standin.SGLangOptions{Model: "m", Mocker: cfg, DPSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		b := health.NewBoard(quiet, nil)
		var es []*Engine
		for r := range 2 {
			e, err := New(t.Context(), Config{URL: srv.URL(), API: APISGLang, BlockSize: 16, DPRank: r, HealthInterval: -1, MetricsInterval: -1, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			e.AttachBoard(b, "w"+string(rune('0'+r)))
			es = append(es, e)
		}
		// Without --enable-metrics: 404, a diagnostic naming the flag.
		if err := es[0].ScrapeNow(t.Context()); err == nil || !strings.Contains(err.Error(), "--enable-metrics") {
			t.Fatalf("scrape without metrics: %v", err)
		}
		if !b.IsActive(DiagMetricsUnavailable, "w0") {
			t.Fatal("no upstream_metrics_unavailable")
		}
		srv.Close()
		srv, err = standin.StartSGLang(standin.SGLangOptions{Model: "m", Mocker: cfg, DPSize: 2, EnableMetrics: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		es[0].cfg.URL, es[1].cfg.URL = srv.URL(), srv.URL()
		// Three requests on rank 1, none on rank 0.
		for range 3 {
			go func() {
				st, err := es[1].Generate(t.Context(), &engine.Request{Prompt: make([]engine.Token, 64), MaxTokens: 2000, IgnoreEOS: true})
				if err == nil {
					drainQuiet(st)
				}
			}()
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			if err := es[1].ScrapeNow(t.Context()); err != nil {
				t.Fatal(err)
			}
			if l, _ := es[1].Load(); l.Running+l.Waiting == 3 {
				break
			}
			if time.Now().After(deadline) {
				l, _ := es[1].Load()
				t.Fatalf("rank 1 load %+v, want 3 requests", l)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := es[0].ScrapeNow(t.Context()); err != nil {
			t.Fatal(err)
		}
		if l, _ := es[0].Load(); l.Running+l.Waiting != 0 || es[0].RunningDecodes() != 0 {
			t.Fatalf("rank 0 load %+v", l)
		}
		if b.IsActive(DiagMetricsUnavailable, "w0") {
			t.Fatal("upstream_metrics_unavailable did not clear")
		}
	})
	t.Run("llamacpp", func(t *testing.T) {
		for _, metrics := range []bool{false, true} {
			srv, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "q.gguf", Slots: 2, Metrics: metrics})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close() })
			e, err := New(t.Context(), Config{URL: srv.URL(), API: APILlamaCpp, HealthInterval: -1, MetricsInterval: -1, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			if err := e.ScrapeNow(t.Context()); err != nil {
				t.Fatalf("--metrics %v: %v", metrics, err)
			}
		}
	})
}

func drainQuiet(st engine.Stream) {
	for {
		if _, err := st.Recv(); err != nil {
			return
		}
	}
}

func TestParseSample(t *testing.T) {
	for _, c := range []struct {
		line   string
		name   string
		labels map[string]string
		v      float64
		bad    bool
	}{
		{"# HELP x y", "", nil, 0, false},
		{`vllm:num_requests_running{engine="0",model_name="m"} 3`, "vllm:num_requests_running", map[string]string{"engine": "0", "model_name": "m"}, 3, false},
		{`sglang:token_usage{dp_rank="1",model_name="a \"q\""} 0.25 1700000000`, "sglang:token_usage", map[string]string{"dp_rank": "1", "model_name": `a "q"`}, 0.25, false},
		{`llamacpp:requests_processing 2`, "llamacpp:requests_processing", nil, 2, false},
		{`x{a="1"`, "", nil, 0, true},
		{`x notanumber`, "", nil, 0, true},
	} {
		name, labels, v, err := parseSample(c.line)
		if (err != nil) != c.bad || name != c.name || v != c.v || (c.labels != nil && !mapsEqual(labels, c.labels)) {
			t.Errorf("%q: %q %v %v %v", c.line, name, labels, v, err)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func FuzzParseSample(f *testing.F) {
	for _, s := range []string{`a{b="c"} 1`, `# x`, `x{a="\\"} 2 3`, `{`, `a{b="`, "a 1e308"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		name, _, _, err := parseSample(line)
		if err == nil && name != "" && strings.ContainsAny(name, "{ \t") {
			t.Fatalf("name %q", name)
		}
	})
}

// FuzzSGLangStream: any bytes from a server end in an error or EOF, never a
// panic, and cumulative output_ids never pass on an id twice.
func FuzzSGLangStream(f *testing.F) {
	for _, s := range []string{
		"data: {\"text\":\"a\",\"output_ids\":[1],\"meta_info\":{\"prompt_tokens\":3,\"cached_tokens\":0,\"finish_reason\":null}}\n\ndata: {\"text\":\"ab\",\"output_ids\":[1,2],\"meta_info\":{\"prompt_tokens\":3,\"cached_tokens\":0,\"finish_reason\":{\"type\":\"length\",\"length\":2}}}\n\ndata: [DONE]\n\n",
		"data: {\"error\":{\"message\":\"bad\"}}\n\ndata: [DONE]\n\n",
		"data: {\"output_ids\":[1,2]}\n\ndata: {\"output_ids\":[1]}\n\n",
		"data: {\"text\":\"x\"}\n\n", "data: [DONE]\n\n", "data: {", "",
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, delta bool) {
		e := &Engine{cfg: Config{URL: "http://x"}}
		s := &sglangStream{sseStream: sseStream{e: e, body: io.NopCloser(nil), r: bufio.NewReader(bytes.NewReader(body)), promptLen: 3}, whole: !delta}
		n := 0
		for range 10000 {
			d, err := s.Recv()
			if err != nil {
				break
			}
			n += len(d.Tokens)
		}
		if n != s.got {
			t.Fatalf("passed on %d ids, counted %d", n, s.got)
		}
	})
}

// TestSGLangOpenAIAPI: SGLang's OpenAI API through --upstream-api openai:
// text only, usage on the final chunk; cached_tokens only with
// --enable-cache-report, and without it upstream_no_cached_tokens.
func TestSGLangOpenAIAPI(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	codec := byteCodec{}
	for _, report := range []bool{true, false} {
		srv, err := standin.StartSGLang(standin.SGLangOptions{Model: "m", Mocker: sglangMocker(), Codec: codec, EnableCacheReport: report})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		e, err := New(t.Context(), Config{URL: srv.URL(), API: APIOpenAI, Codec: codec, BlockSize: 16, HealthInterval: -1, MetricsInterval: -1, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		b := health.NewBoard(quiet, nil)
		e.AttachBoard(b, "w0")
		prompt := make([]engine.Token, 64)
		for i := range prompt {
			prompt[i] = engine.Token('a' + i%26)
		}
		var cached []int
		for range 2 {
			st, err := e.Generate(t.Context(), &engine.Request{Prompt: prompt, MaxTokens: 5})
			if err != nil {
				t.Fatal(err)
			}
			c := -1
			for {
				d, err := st.Recv()
				if err != nil {
					break
				}
				if d.PromptTokens > 0 {
					c = d.CachedTokens
				}
			}
			cached = append(cached, c)
		}
		if report && (cached[0] != 0 || cached[1] < 48) {
			t.Fatalf("--enable-cache-report: cached %v", cached)
		}
		if !report && !b.IsActive(DiagNoCachedTokens, "w0") {
			t.Fatal("no upstream_no_cached_tokens without --enable-cache-report")
		}
	}
}

// byteCodec is one token per byte: text round-trips exactly.
type byteCodec struct{}

func (byteCodec) Encode(s string) []engine.Token {
	out := make([]engine.Token, len(s))
	for i := range len(s) {
		out[i] = engine.Token(s[i])
	}
	return out
}

func (byteCodec) Decode(ids []engine.Token) string {
	b := make([]byte, len(ids))
	for i, t := range ids {
		b[i] = byte(t)
	}
	return string(b)
}
