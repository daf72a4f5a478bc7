package standin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
)

// Codec turns ids into text and back (tokenizer.Tokenizer satisfies it).
type Codec interface {
	Encode(text string) []engine.Token
	Decode(ids []engine.Token) string
}

// Options select the server's behaviour.
type Options struct {
	// Model is the served model name (/v1/models).
	Model string
	// Mocker computes; its KVEvents configure the publisher.
	Mocker mocker.Config
	// ReturnTokenIDs honours return_token_ids (vLLM ≥ 0.10.2).
	ReturnTokenIDs bool
	// PromptTokensDetails reports cached tokens (--enable-prompt-tokens-details).
	PromptTokensDetails bool
	// Codec writes the text of chunks and reads text prompts (nil: text
	// is empty and text prompts are refused).
	Codec Codec
	// GPUCacheMetric publishes the KV usage under its older name
	// vllm:gpu_cache_usage_perc instead of vllm:kv_cache_usage_perc.
	GPUCacheMetric bool
	// KeepAlive is the server's keep-alive timeout (uvicorn's
	// timeout_keep_alive, which vLLM sets from VLLM_HTTP_TIMEOUT_KEEP_ALIVE,
	// default 5 s: vllm/envs.py, vllm/entrypoints/openai/api_server.py; 0:
	// none): a request that
	// arrives on a connection idle that long is closed unanswered
	// (keepalive.go).
	KeepAlive time.Duration
}

// Server is a running stand-in.
type Server struct {
	opts Options
	ka   *keepAlive
	eng  *mocker.Engine
	srv  *http.Server
	lis  net.Listener
	reqs atomic.Int64
}

// Start listens on 127.0.0.1 (any port) and serves.
func Start(opts Options) (*Server, error) {
	if opts.Model == "" {
		opts.Model = "standin"
	}
	opts.Mocker.Model = opts.Model
	eng, err := mocker.New(opts.Mocker)
	if err != nil {
		return nil, fmt.Errorf("standin: %w", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		eng.Close()
		return nil, fmt.Errorf("standin: %w", err)
	}
	s := &Server{opts: opts, eng: eng, lis: lis}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {}) // vLLM: 200, empty body
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("GET /metrics", s.metrics)
	if opts.Codec != nil {
		mux.HandleFunc("POST /tokenize", s.tokenize)
	}
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	if opts.KeepAlive > 0 {
		s.ka = &keepAlive{timeout: opts.KeepAlive}
		s.ka.install(s.srv)
	}
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

// IdleClosed counts requests closed unanswered because their connection
// had been idle for KeepAlive.
func (s *Server) IdleClosed() int64 { return s.ka.idleClosed() }

// URL is the server's base URL.
func (s *Server) URL() string { return "http://" + s.lis.Addr().String() }

// Engine is the mocker behind the server (its KV event endpoints).
func (s *Server) Engine() *mocker.Engine { return s.eng }

// Requests counts completions served.
func (s *Server) Requests() int64 { return s.reqs.Load() }

// Close stops the server and the engine.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	return errors.Join(err, s.eng.Close())
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	// vLLM lists max_model_len beside the OpenAI fields
	// (vllm/entrypoints/openai/protocol.py, ModelCard).
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{map[string]any{
		"id": s.opts.Model, "object": "model", "owned_by": "vllm", "max_model_len": s.eng.Info().ContextLength}}})
}

// tokenize is vLLM's POST /tokenize for a prompt: {"model", "prompt",
// "add_special_tokens"} → {"count", "max_model_len", "tokens"}
// (vllm/entrypoints/openai/protocol.py, TokenizeCompletionRequest and
// TokenizeResponse). The stand-in's tokenizer adds no special tokens.
func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Prompt string `json:"prompt"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		errorBody(w, http.StatusBadRequest, err.Error())
		return
	}
	ids := s.opts.Codec.Encode(req.Prompt)
	writeJSON(w, http.StatusOK, map[string]any{"count": len(ids), "max_model_len": s.eng.Info().ContextLength, "tokens": ids})
}

type request struct {
	Model          string          `json:"model"`
	Prompt         json.RawMessage `json:"prompt"`
	MaxTokens      *int            `json:"max_tokens"`
	MinTokens      int             `json:"min_tokens"`
	IgnoreEOS      bool            `json:"ignore_eos"`
	StopTokenIDs   []engine.Token  `json:"stop_token_ids"`
	Stream         bool            `json:"stream"`
	ReturnTokenIDs bool            `json:"return_token_ids"`
	// Logprobs is completions' legacy integer logprobs and
	// ReturnTokensAsTokenIDs names its tokens "token_id:N" (vLLM's
	// CompletionRequest).
	Logprobs               *int `json:"logprobs"`
	ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids"`
	StreamOptions          *struct {
		IncludeUsage         bool `json:"include_usage"`
		ContinuousUsageStats bool `json:"continuous_usage_stats"`
	} `json:"stream_options"`
}

// errorBody is vLLM's ErrorResponse.
func errorBody(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"message": msg, "type": "BadRequestError", "param": nil, "code": code}})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req request
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&req); err != nil {
		errorBody(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Model != s.opts.Model {
		// vLLM: 404 "The model `x` does not exist."
		errorBody(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	var prompt []engine.Token
	if err := json.Unmarshal(req.Prompt, &prompt); err != nil {
		var text string
		if json.Unmarshal(req.Prompt, &text) != nil || s.opts.Codec == nil {
			errorBody(w, http.StatusBadRequest, "prompt must be a string or a list of token ids")
			return
		}
		prompt = s.opts.Codec.Encode(text)
	}
	max := 16 // vLLM's completions default
	if req.MaxTokens != nil {
		max = *req.MaxTokens
	}
	info := s.eng.Info()
	if len(prompt)+max > info.ContextLength {
		errorBody(w, http.StatusBadRequest, fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens.", info.ContextLength, len(prompt)+max))
		return
	}
	if lp := req.Logprobs; lp != nil && (*lp < -1 || *lp > maxLogprobs) {
		// vLLM refuses past --max-logprobs (20 by default) with this
		// message (vllm/v1/engine/processor.py, _validate_logprobs); -1
		// (the whole vocabulary) is not served here.
		errorBody(w, http.StatusBadRequest, fmt.Sprintf("Requested sample logprobs of %d, which is greater than max allowed: %d", *lp, maxLogprobs))
		return
	}
	ereq := &engine.Request{ID: r.Header.Get("X-Request-Id"), Model: req.Model, Prompt: prompt,
		MaxTokens: max, MinTokens: req.MinTokens, IgnoreEOS: req.IgnoreEOS, StopTokens: req.StopTokenIDs}
	if lp := req.Logprobs; lp != nil && *lp >= 0 {
		ereq.Logprobs, ereq.TopLogprobs = true, *lp
	}
	s.reqs.Add(1)
	st, err := s.eng.Generate(r.Context(), ereq)
	if err != nil {
		errorBody(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	ids := req.ReturnTokenIDs && s.opts.ReturnTokenIDs
	id := fmt.Sprintf("cmpl-%d", s.reqs.Load())
	usage := func(cached, completion int) map[string]any {
		u := map[string]any{"prompt_tokens": len(prompt), "completion_tokens": completion, "total_tokens": len(prompt) + completion}
		if s.opts.PromptTokensDetails {
			u["prompt_tokens_details"] = map[string]any{"cached_tokens": cached}
		}
		return u
	}
	offset := 0
	choice := func(toks []engine.Token, lps []engine.TokenLogprob, finish engine.FinishReason) map[string]any {
		c := map[string]any{"index": 0, "text": s.text(toks), "logprobs": nil, "finish_reason": nil}
		if ereq.Logprobs {
			c["logprobs"], offset = s.logprobs(lps, req.ReturnTokensAsTokenIDs, offset)
		}
		if finish != engine.FinishNone {
			c["finish_reason"] = finishName(finish)
		}
		if ids {
			c["token_ids"] = toks
		}
		return c
	}
	var all []engine.Token
	cached, n := 0, 0
	if !req.Stream {
		var finish engine.FinishReason
		var lps []engine.TokenLogprob
		all, lps, finish, cached = drainLogprobs(st)
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "text_completion", "created": time.Now().Unix(),
			"model": req.Model, "choices": []any{choice(all, lps, finish)}, "usage": usage(cached, len(all))})
		return
	}
	event := sseWriter(w)
	cont := req.StreamOptions != nil && req.StreamOptions.ContinuousUsageStats
	final := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	write := func(v map[string]any) {
		v["id"], v["object"], v["created"], v["model"] = id, "text_completion", time.Now().Unix(), req.Model
		event(v)
	}
	for {
		d, err := st.Recv()
		if err != nil {
			break
		}
		if d.PromptTokens > 0 {
			cached = d.CachedTokens
		}
		n += len(d.Tokens)
		chunk := map[string]any{"choices": []any{choice(d.Tokens, d.Logprobs, d.Finish)}}
		if cont {
			chunk["usage"] = usage(cached, n)
		}
		write(chunk)
		if d.Finish != engine.FinishNone {
			break
		}
	}
	if final {
		write(map[string]any{"choices": []any{}, "usage": usage(cached, n)})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// maxLogprobs is vLLM's default --max-logprobs.
const maxLogprobs = 20

// logprobs writes a choice's logprobs as vLLM's completions do
// (vllm/entrypoints/openai/serving_completion.py,
// _create_completion_logprobs): tokens by text, or "token_id:N" with
// return_tokens_as_token_ids; each position's top_logprobs object holds
// the sampled token and the alternatives; text_offset counts characters
// from offset. It returns the offset after the last token.
func (s *Server) logprobs(lps []engine.TokenLogprob, asIDs bool, offset int) (map[string]any, int) {
	name := func(id engine.Token) string {
		if asIDs {
			return fmt.Sprintf("token_id:%d", id)
		}
		return s.text([]engine.Token{id})
	}
	tokens := make([]string, len(lps))
	vals := make([]float64, len(lps))
	tops := make([]map[string]float64, len(lps))
	offsets := make([]int, len(lps))
	for i, lp := range lps {
		tokens[i] = name(lp.Token)
		vals[i] = max(float64(lp.Logprob), -9999)
		tops[i] = map[string]float64{tokens[i]: vals[i]}
		for _, t := range lp.Top {
			tops[i][name(t.Token)] = max(float64(t.Logprob), -9999)
		}
		offsets[i] = offset
		offset += len([]rune(s.text([]engine.Token{lp.Token})))
	}
	return map[string]any{"tokens": tokens, "token_logprobs": vals, "top_logprobs": tops, "text_offset": offsets}, offset
}

// drainLogprobs is drain that also keeps the engine's logprobs.
func drainLogprobs(st engine.Stream) (toks []engine.Token, lps []engine.TokenLogprob, finish engine.FinishReason, cached int) {
	for {
		d, err := st.Recv()
		if err != nil {
			return toks, lps, finish, cached
		}
		if d.PromptTokens > 0 {
			cached = d.CachedTokens
		}
		toks, lps = append(toks, d.Tokens...), append(lps, d.Logprobs...)
		if d.Finish != engine.FinishNone {
			finish = d.Finish
		}
	}
}

// drain reads a whole non-streaming result: its tokens, the last finish
// reason (FinishNone if the stream ended without one) and the prompt's
// cached tokens. An error ends it like the end of the stream: the
// stand-ins answer with what was generated, as the servers they mimic do
// when the engine aborts a request.
func drain(st engine.Stream) (toks []engine.Token, finish engine.FinishReason, cached int) {
	for {
		d, err := st.Recv()
		if err != nil {
			return toks, finish, cached
		}
		if d.PromptTokens > 0 {
			cached = d.CachedTokens
		}
		toks = append(toks, d.Tokens...)
		if d.Finish != engine.FinishNone {
			finish = d.Finish
		}
	}
}

// sseWriter starts an event stream on w and returns the function that
// writes one "data: {json}" event and flushes it (every stand-in's
// streaming format; the closing "data: [DONE]" is the caller's).
func sseWriter(w http.ResponseWriter) func(v any) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl, _ := w.(http.Flusher)
	return func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if fl != nil {
			fl.Flush()
		}
	}
}

func (s *Server) text(toks []engine.Token) string {
	if s.opts.Codec == nil {
		return ""
	}
	return s.opts.Codec.Decode(toks)
}

func finishName(f engine.FinishReason) string {
	if f == engine.FinishLength {
		return "length"
	}
	return "stop"
}

// metrics: vLLM's scheduler gauges (vllm/v1/metrics/loggers.py,
// PrometheusStatLogger) labelled model_name and engine (the engine index),
// always on: vLLM mounts /metrics unconditionally. The KV usage is a
// fraction despite the _perc suffix.
func (s *Server) metrics(w http.ResponseWriter, _ *http.Request) {
	l := s.eng.Load()
	usage := "vllm:kv_cache_usage_perc"
	if s.opts.GPUCacheMetric {
		usage = "vllm:gpu_cache_usage_perc"
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	labels := fmt.Sprintf(`{engine="0",model_name=%q}`, s.opts.Model)
	fmt.Fprintf(w, "# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running%s %d\n", labels, l.Running)
	fmt.Fprintf(w, "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting%s %d\n", labels, l.Waiting)
	fmt.Fprintf(w, "# HELP %s KV-cache usage. 1 means 100 percent usage.\n# TYPE %s gauge\n%s%s %g\n", usage, usage, usage, labels, l.KVUsage)
}
