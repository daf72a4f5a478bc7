package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeServer is a scriptable OpenAI-compatible endpoint: tokens at a fixed
// pace, an optional prefix cache (a prompt whose first CacheChars
// characters were seen before is "cached": faster TTFT and cached_tokens
// reported), and misbehaviour on chosen requests.
type fakeServer struct {
	TTFT      time.Duration
	HitTTFT   time.Duration
	TokenGap  time.Duration
	CacheKey  int // characters of prompt that key the cache; 0: no cache
	Worker    string
	Fail500   int // every Nth request answers 500
	Drop      int // every Nth request's connection is closed without a response
	Cut       int // every Nth request's stream stops half-way, no [DONE]
	ErrEvent  int // every Nth request gets an SSE error event
	Serialize bool
	// Metrics serves GET /metrics with vLLM's prefix-cache counters and
	// queue gauge; Plain leaves out every extension a bare OpenAI server
	// lacks (usage in streams, cached_tokens, the worker header).
	Metrics bool
	Plain   bool

	queries, hits, inflight atomic.Int64

	n      atomic.Int64
	mu     sync.Mutex
	seen   map[string]bool
	serMu  sync.Mutex
	Bodies []map[string]any
}

func (f *fakeServer) start(t testing.TB) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"fake-model","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", f.generate)
	mux.HandleFunc("POST /v1/completions", f.generate)
	if f.Metrics {
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "# HELP vllm:prefix_cache_queries_total q\n# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{model_name=\"fake-model\"} %d\n"+
				"# HELP vllm:prefix_cache_hits_total h\n# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{model_name=\"fake-model\"} %d\n"+
				"# HELP vllm:num_requests_waiting w\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"fake-model\"} %d\n",
				f.queries.Load(), f.hits.Load(), f.inflight.Load())
		})
	}
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func every(n int, i int64) bool { return n > 0 && i%int64(n) == int64(n-1) }

func (f *fakeServer) generate(w http.ResponseWriter, r *http.Request) {
	i := f.n.Add(1) - 1
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	f.mu.Lock()
	f.Bodies = append(f.Bodies, body)
	f.mu.Unlock()
	if f.Serialize {
		f.serMu.Lock()
		defer f.serMu.Unlock()
	}
	switch {
	case every(f.Fail500, i):
		w.WriteHeader(500)
		_, _ = io.WriteString(w, `{"error":{"message":"injected failure","type":"server_error"}}`)
		return
	case every(f.Drop, i):
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	prompt := ""
	chat := false
	if msgs, ok := body["messages"].([]any); ok {
		chat = true
		for _, m := range msgs {
			prompt += m.(map[string]any)["content"].(string)
		}
	} else if p, ok := body["prompt"].(string); ok {
		prompt = p
	} else if ids, ok := body["prompt"].([]any); ok {
		prompt = fmt.Sprint(ids)
	}
	n := 4
	if mt, ok := body["max_tokens"].(float64); ok {
		n = int(mt)
	}
	inTok := len(strings.Fields(prompt))
	cached := 0
	ttft := f.TTFT
	if f.CacheKey > 0 && len(prompt) >= f.CacheKey {
		key := prompt[:f.CacheKey]
		f.mu.Lock()
		if f.seen == nil {
			f.seen = map[string]bool{}
		}
		if f.seen[key] {
			cached, ttft = inTok*9/10, f.HitTTFT
		}
		f.seen[key] = true
		f.mu.Unlock()
	}
	f.queries.Add(int64(inTok))
	f.hits.Add(int64(cached))
	f.inflight.Add(1)
	defer f.inflight.Add(-1)
	if f.Worker != "" && !f.Plain {
		w.Header().Set("X-Tandem-Worker", f.Worker)
	}
	stream, _ := body["stream"].(bool)
	time.Sleep(ttft)
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}`, inTok, n, inTok+n, cached)
	if !stream {
		text := strings.TrimSpace(strings.Repeat(" tok", n))
		if chat {
			fmt.Fprintf(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":%q}}],"usage":%s}`, text, usage)
		} else {
			fmt.Fprintf(w, `{"choices":[{"index":0,"text":%q}],"usage":%s}`, text, usage)
		}
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	if chat {
		_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`+"\n\n")
	}
	for k := 0; k < n; k++ {
		if k > 0 {
			time.Sleep(f.TokenGap)
		}
		if every(f.Cut, i) && k == n/2 {
			fl.Flush()
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = buf.Flush()
				_ = conn.Close()
			}
			return
		}
		if every(f.ErrEvent, i) && k == n/2 {
			_, _ = io.WriteString(w, `data: {"error":{"message":"engine died","type":"service_unavailable"}}`+"\n\ndata: [DONE]\n\n")
			return
		}
		if chat {
			fmt.Fprintf(w, `data: {"choices":[{"index":0,"delta":{"content":" tok%d"},"finish_reason":null}]}`+"\n\n", k)
		} else {
			fmt.Fprintf(w, `data: {"choices":[{"index":0,"text":" tok%d","finish_reason":null}]}`+"\n\n", k)
		}
		fl.Flush()
	}
	if f.Plain {
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		return
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":%s}\n\ndata: [DONE]\n\n", usage)
}
