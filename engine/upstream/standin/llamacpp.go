package standin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/internal/backoff"
)

// LlamaCppOptions select a llama-server look-alike's behaviour. Each cites
// ggml-org/llama.cpp tools/server (README.md, server.cpp,
// server-common.cpp).
type LlamaCppOptions struct {
	// Model is the name /v1/models lists (llama-server: the GGUF's file
	// name or --alias).
	Model string
	// Slots is -np/--parallel: independent sequences, each with its own
	// cache of one prompt (default 4).
	Slots int
	// NCtx is each slot's context (-c / np; default 8192): a longer prompt
	// is refused with exceed_context_size_error.
	NCtx int
	// LoadTime: /health answers 503 "Loading model" for this long after
	// Start, as the server does until the model is loaded; every other
	// endpoint too (the server's readiness middleware).
	LoadTime time.Duration
	// PrefillPerToken and DecodePerToken are the simulated compute times:
	// only the prompt tokens a slot does not already hold are evaluated.
	PrefillPerToken, DecodePerToken time.Duration
	// PingEvery sends SSE comment pings (": ping") while a stream waits
	// (--sse-ping-interval, 30 s by default in llama-server; 0: one ping
	// before the first token, so readers always meet one).
	PingEvery time.Duration
	// SlotSimilarity is -sps/--slot-prompt-similarity (default 0.10; a
	// negative value disables it): with id_slot -1, the idle slot whose
	// cached prompt shares the longest prefix wins if the shared part is
	// more than this fraction of the prompt, else the least recently used.
	SlotSimilarity float64
	// Metrics is --metrics: without it GET /metrics answers 501
	// not_supported_error (server.cpp, handle_metrics: "This server does
	// not support metrics endpoint. Start it with `--metrics`").
	Metrics bool
	// KeepAlive is the server's keep-alive timeout (cpp-httplib's
	// CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND, 5 s; 0: connections never time
	// out): "Keep-Alive: timeout=N" on every answer, and a request that
	// arrives on a connection idle that long is closed unanswered
	// (keepalive.go).
	KeepAlive time.Duration
	// Addr is where it listens (default 127.0.0.1:0, any port): a test of
	// a server that starts after Tandem names the port Tandem was given.
	Addr string
	// Codec is the server's tokenizer, for POST /tokenize (nil: the route
	// answers 404, a stand-in that cannot tokenize).
	Codec Codec
	// NoCacheN is a build from before timings.cache_n (such as b4700):
	// the stop event's timings carry prompt_n (the prompt
	// tokens evaluated) only, and tokens_cached is the slot's n_past,
	// prompt plus generated tokens, even on a cold prompt
	// (tools/server/server.cpp, send_final_response of those builds).
	NoCacheN bool
	// HoldBack is a build that sends no event for a token whose text it
	// holds back (an incomplete UTF-8 sequence, a partial stop string) and
	// releases that text with the next event, whose tokens are only its
	// own: every HoldBack-th token (0: none) is held so, its id dropped, as
	// older builds' process_token/send_partial_response did
	// (tools/server/server.cpp: the partial result carries the current
	// token only). tokens_predicted still counts every token.
	HoldBack int
}

// LlamaCpp is a running llama-server look-alike: POST /completion with
// token prompts, cache_prompt, id_slot, return_tokens; SSE with comment
// pings and no [DONE]; GET /health, /v1/models, /slots, /metrics
// (llamacpp:*). It publishes no KV events, as llama.cpp does not.
type LlamaCpp struct {
	opts  LlamaCppOptions
	ka    *keepAlive
	srv   *http.Server
	lis   net.Listener
	ready time.Time

	mu      sync.Mutex
	cond    *sync.Cond
	slots   []llamaSlot
	clock   uint64
	metrics struct{ promptTokens, predicted, processing, deferred int64 }
}

type llamaSlot struct {
	tokens   []engine.Token // prompt + output of the last task: the slot's cache
	busy     bool
	lastUsed uint64
}

// StartLlamaCpp listens on 127.0.0.1 (any port) and serves.
func StartLlamaCpp(opts LlamaCppOptions) (*LlamaCpp, error) {
	if opts.Model == "" {
		opts.Model = "standin.gguf"
	}
	if opts.Slots <= 0 {
		opts.Slots = 4
	}
	if opts.NCtx <= 0 {
		opts.NCtx = 8192
	}
	if opts.SlotSimilarity == 0 {
		opts.SlotSimilarity = 0.10
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("standin: %w", err)
	}
	s := &LlamaCpp{opts: opts, lis: lis, ready: time.Now().Add(opts.LoadTime), slots: make([]llamaSlot, opts.Slots)}
	s.cond = sync.NewCond(&s.mu)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /v1/models", s.loaded(s.models))
	mux.HandleFunc("POST /completion", s.loaded(s.completion))
	mux.HandleFunc("GET /slots", s.loaded(s.slotsInfo))
	mux.HandleFunc("GET /props", s.loaded(s.props))
	if opts.Codec != nil {
		mux.HandleFunc("POST /tokenize", s.loaded(s.tokenize))
	}
	mux.HandleFunc("GET /metrics", s.loaded(s.metricsText))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	if opts.KeepAlive > 0 {
		s.ka = &keepAlive{timeout: opts.KeepAlive}
		s.ka.install(s.srv)
	}
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

// URL is the server's base URL.
func (s *LlamaCpp) URL() string { return "http://" + s.lis.Addr().String() }

// IdleClosed counts requests closed unanswered because their connection
// had been idle for KeepAlive.
func (s *LlamaCpp) IdleClosed() int64 { return s.ka.idleClosed() }

// Close stops the server.
func (s *LlamaCpp) Close() error { return s.srv.Close() }

// llamaErr writes format_error_response's shape (server-common.cpp).
func llamaErr(w http.ResponseWriter, code int, typ, msg string, extra map[string]any) {
	body := map[string]any{"code": code, "message": msg, "type": typ}
	for k, v := range extra {
		body[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": body})
}

func (s *LlamaCpp) loading() bool { return time.Now().Before(s.ready) }

// health: 503 {"error":{"code":503,"message":"Loading model","type":
// "unavailable_error"}} while loading, then 200 {"status":"ok"}
// (tools/server/README.md, GET /health).
func (s *LlamaCpp) health(w http.ResponseWriter, _ *http.Request) {
	if s.loading() {
		llamaErr(w, http.StatusServiceUnavailable, "unavailable_error", "Loading model", nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"status":"ok"}`)
}

func (s *LlamaCpp) loaded(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.loading() {
			llamaErr(w, http.StatusServiceUnavailable, "unavailable_error", "Loading model", nil)
			return
		}
		h(w, r)
	}
}

// models: llama-server lists one model, with its GGUF metadata under meta
// and no max_model_len.
func (s *LlamaCpp) models(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{map[string]any{
		"id": s.opts.Model, "object": "model", "owned_by": "llamacpp", "created": 0,
		"meta": map[string]any{"n_ctx_train": s.opts.NCtx, "n_vocab": 151936}}}})
}

// props: the server's settings; default_generation_settings is a slot's,
// whose n_ctx is the context per slot (tools/server/README.md, GET /props).
func (s *LlamaCpp) props(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"default_generation_settings": map[string]any{"id": 0, "n_ctx": s.opts.NCtx, "is_processing": false},
		"total_slots":                 s.opts.Slots, "model_path": "/models/" + s.opts.Model})
}

// tokenize: {"content", "add_special"} → {"tokens"} (README, POST
// /tokenize). The stand-in's tokenizer adds no special tokens.
func (s *LlamaCpp) tokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Content string `json:"content"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		llamaErr(w, http.StatusBadRequest, "invalid_request_error", err.Error(), nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"tokens": s.opts.Codec.Encode(req.Content)})
}

func (s *LlamaCpp) slotsInfo(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := make([]map[string]any, len(s.slots))
	for i, sl := range s.slots {
		out[i] = map[string]any{"id": i, "n_ctx": s.opts.NCtx, "is_processing": sl.busy, "n_past": len(sl.tokens)}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// metricsText: the llamacpp:* names of the README's /metrics (--metrics).
func (s *LlamaCpp) metricsText(w http.ResponseWriter, _ *http.Request) {
	if !s.opts.Metrics {
		llamaErr(w, http.StatusNotImplemented, "not_supported_error", "This server does not support metrics endpoint. Start it with `--metrics`", nil)
		return
	}
	s.mu.Lock()
	m := s.metrics
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total %d\n", m.promptTokens)
	fmt.Fprintf(w, "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total %d\n", m.predicted)
	fmt.Fprintf(w, "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing %d\n", m.processing)
	fmt.Fprintf(w, "# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred %d\n", m.deferred)
}

type completionReq struct {
	Prompt       []engine.Token `json:"prompt"`
	NPredict     *int           `json:"n_predict"`
	Stream       bool           `json:"stream"`
	CachePrompt  *bool          `json:"cache_prompt"`
	IDSlot       *int           `json:"id_slot"`
	ReturnTokens bool           `json:"return_tokens"`
	// NProbs asks for each token's logprob and n_probs alternatives.
	NProbs int `json:"n_probs"`
	// JSONSchema (an object) or Grammar (GBNF text): the server reads
	// json_schema when grammar is absent, else grammar
	// (params_from_json_cmpl in tools/server; builds before it refused
	// both together with "Either \"json_schema\" or \"grammar\" can be
	// specified, but not both", and Tandem sends one at most). Accepted
	// and generated unconstrained: the look-alike has no grammar engine.
	JSONSchema json.RawMessage `json:"json_schema"`
	Grammar    json.RawMessage `json:"grammar"`
}

func lcp(a, b []engine.Token) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// acquire picks the task's slot as get_available_slot does (server.cpp):
// id_slot when given (the task waits for it), else the most similar idle
// slot above SlotSimilarity, else the least recently used idle one;
// with none idle the task is deferred. It waits until ctx ends.
func (s *LlamaCpp) acquire(ctx context.Context, want int, prompt []engine.Token) (int, error) {
	stop := context.AfterFunc(ctx, func() { s.mu.Lock(); s.cond.Broadcast(); s.mu.Unlock() })
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	deferred := false
	defer func() {
		if deferred {
			s.metrics.deferred--
		}
	}()
	for {
		pick := -1
		if want >= 0 {
			if !s.slots[want].busy {
				pick = want
			}
		} else {
			best := 0
			for i, sl := range s.slots {
				if sl.busy {
					continue
				}
				if n := lcp(sl.tokens, prompt); n > best && s.opts.SlotSimilarity >= 0 && float64(n) > s.opts.SlotSimilarity*float64(len(prompt)) {
					pick, best = i, n
				}
			}
			if pick < 0 {
				for i, sl := range s.slots {
					if !sl.busy && (pick < 0 || sl.lastUsed < s.slots[pick].lastUsed) {
						pick = i
					}
				}
			}
		}
		if pick >= 0 {
			s.slots[pick].busy = true
			s.clock++
			s.slots[pick].lastUsed = s.clock
			s.metrics.processing++
			return pick, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if !deferred {
			deferred = true
			s.metrics.deferred++
		}
		s.cond.Wait()
	}
}

func (s *LlamaCpp) release(slot int, tokens []engine.Token) {
	s.mu.Lock()
	s.slots[slot].busy = false
	s.slots[slot].tokens = tokens
	s.metrics.processing--
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *LlamaCpp) completion(w http.ResponseWriter, r *http.Request) {
	var req completionReq
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&req); err != nil {
		llamaErr(w, http.StatusBadRequest, "invalid_request_error", err.Error(), nil)
		return
	}
	if len(req.Prompt) == 0 {
		llamaErr(w, http.StatusBadRequest, "invalid_request_error", "\"prompt\" must be provided", nil)
		return
	}
	if len(req.Prompt) >= s.opts.NCtx {
		llamaErr(w, http.StatusBadRequest, "exceed_context_size_error", "the request exceeds the available context size, try increasing it",
			map[string]any{"n_prompt_tokens": len(req.Prompt), "n_ctx": s.opts.NCtx})
		return
	}
	want := -1
	if req.IDSlot != nil && *req.IDSlot >= 0 {
		if *req.IDSlot >= len(s.slots) {
			llamaErr(w, http.StatusBadRequest, "invalid_request_error", "Invalid slot ID", nil)
			return
		}
		want = *req.IDSlot
	}
	nPredict := s.opts.NCtx - len(req.Prompt) // -1 (default): until the context is full
	if req.NPredict != nil && *req.NPredict >= 0 {
		nPredict = min(*req.NPredict, nPredict)
	}
	flusher, _ := w.(http.Flusher)
	if req.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		// A ping before the task runs: readers must skip SSE comments.
		_, _ = io.WriteString(w, ": ping\n\n")
		if flusher != nil {
			flusher.Flush()
		}
	}
	slot, err := s.acquire(r.Context(), want, req.Prompt)
	if err != nil {
		return
	}
	s.mu.Lock()
	cached := 0
	if req.CachePrompt == nil || *req.CachePrompt { // cache_prompt defaults to true
		cached = lcp(s.slots[slot].tokens, req.Prompt)
	}
	s.mu.Unlock()
	// At least one prompt token is evaluated, for the logits
	// (server.cpp: "we have to evaluate at least 1 token").
	cached = min(cached, len(req.Prompt)-1)
	all := append([]engine.Token(nil), req.Prompt...)
	defer func() { s.release(slot, all) }()
	if !backoff.Sleep(r.Context(), time.Duration(len(req.Prompt)-cached)*s.opts.PrefillPerToken) {
		return
	}
	s.mu.Lock()
	s.metrics.promptTokens += int64(len(req.Prompt) - cached)
	s.mu.Unlock()
	var out []engine.Token
	held := ""
	lastPing := time.Now()
	for i := range nPredict {
		if i > 0 && !backoff.Sleep(r.Context(), s.opts.DecodePerToken) {
			return
		}
		tok := engine.Token(1000 + (int(req.Prompt[len(req.Prompt)-1])*31+i)%50000)
		out = append(out, tok)
		all = append(all, tok)
		if req.Stream {
			if s.opts.PingEvery > 0 && time.Since(lastPing) >= s.opts.PingEvery {
				_, _ = io.WriteString(w, ": ping\n\n")
				lastPing = time.Now()
			}
			text := s.text(tok)
			if s.opts.HoldBack > 0 && (i+1)%s.opts.HoldBack == 0 && i+1 < nPredict {
				held += text // no event: released with the next one
				continue
			}
			ev := map[string]any{"index": 0, "content": held + text, "stop": false, "id_slot": slot,
				"tokens_predicted": i + 1, "tokens_evaluated": len(req.Prompt)}
			held = ""
			if req.ReturnTokens {
				ev["tokens"] = []engine.Token{tok}
			}
			if req.NProbs > 0 {
				ev["completion_probabilities"] = []any{llamaProbs(tok, req.NProbs)}
			}
			if !writeSSE(w, flusher, ev) {
				return
			}
		}
	}
	s.mu.Lock()
	s.metrics.predicted += int64(len(out))
	s.mu.Unlock()
	timings := map[string]any{"cache_n": cached, "prompt_n": len(req.Prompt) - cached, "predicted_n": len(out)}
	if s.opts.NoCacheN {
		delete(timings, "cache_n")
	}
	final := map[string]any{"index": 0, "content": "", "stop": true, "id_slot": slot, "model": s.opts.Model,
		"stop_type": "limit", "tokens_predicted": len(out), "tokens_evaluated": len(req.Prompt), "tokens_cached": len(all) - 1,
		"timings": timings}
	if !req.Stream {
		final["content"] = fmt.Sprint(out)
		if req.ReturnTokens {
			final["tokens"] = out
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(final)
		return
	}
	final["tokens"] = []engine.Token{}
	writeSSE(w, flusher, final) // no [DONE]: the stop event ends /completion's stream
}

// text is a token's text: the Codec's when there is one.
func (s *LlamaCpp) text(tok engine.Token) string {
	if s.opts.Codec != nil {
		return s.opts.Codec.Decode([]engine.Token{tok})
	}
	return fmt.Sprintf(" t%d", tok)
}

// LlamaCppLogprob is the stand-in's made-up distribution at a position
// whose token is tok: tok itself at logprob -0.25, then tok+1, tok+2, ...
// each 1 lower (synthetic, for tests of the wire shape).
func LlamaCppLogprob(tok engine.Token, k int) (engine.Token, float64) {
	return tok + engine.Token(k), -0.25 - float64(k)
}

// llamaProbs is one completion_probabilities entry (server.cpp,
// completion_token_output::to_json with post_sampling_probs false): id,
// token, bytes, logprob and top_logprobs of the same fields.
func llamaProbs(tok engine.Token, n int) map[string]any {
	entry := func(id engine.Token, lp float64) map[string]any {
		text := fmt.Sprintf(" t%d", id)
		bs := make([]int, len(text)) // an array of integers, not base64
		for i := range len(text) {
			bs[i] = int(text[i])
		}
		return map[string]any{"id": id, "token": text, "bytes": bs, "logprob": lp}
	}
	_, lp := LlamaCppLogprob(tok, 0)
	e := entry(tok, lp)
	top := make([]any, n)
	for k := range n {
		top[k] = entry(LlamaCppLogprob(tok, k))
	}
	e["top_logprobs"] = top
	return e
}

func writeSSE(w io.Writer, f http.Flusher, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
		return false
	}
	if f != nil {
		f.Flush()
	}
	return true
}
