package standin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
)

// SGLangOptions select an SGLang look-alike's behaviour. Each cites
// sgl-project/sglang python/sglang/srt: entrypoints/http_server.py (the
// routes), managers/io_struct.py (GenerateReqInput),
// managers/tokenizer_manager.py (the /generate answer and its meta_info),
// disaggregation/kv_events.py (the publishers), metrics/collector.py
// (/metrics).
type SGLangOptions struct {
	// Model is --served-model-name (default: the model path).
	Model string
	// Mocker computes, one per attention-DP rank; its KVEvents configure
	// each rank's publisher (SGLang mode is forced). Endpoint and
	// ReplayEndpoint are the base: rank r publishes at port + r
	// (ZmqEventPublisher.offset_endpoint_port); a base port 0 picks
	// DPSize consecutive free ports.
	Mocker mocker.Config
	// DPSize is --dp-size with --enable-dp-attention (default 1): DPSize
	// schedulers, each with its own KV cache and publisher.
	DPSize int
	// StreamOutput is --stream-output: each streamed chunk carries only the
	// new output_ids. Without it (SGLang's default) every chunk carries the
	// whole text and all output_ids so far (tokenizer_manager.py,
	// _handle_batch_output: state.text += ...; output_ids copied whole).
	StreamOutput bool
	// EnableMetrics is --enable-metrics: GET /metrics serves sglang:*
	// gauges (404 without it, as the route is not mounted).
	EnableMetrics bool
	// Codec detokenizes output_ids into text and tokenizes text prompts
	// (nil: text is empty and "text" prompts are refused).
	Codec Codec
	// EnableCacheReport is --enable-cache-report: the OpenAI API's usage
	// carries prompt_tokens_details.cached_tokens only with it
	// (entrypoints/openai/usage_processor.py; server_args.py: "Return
	// number of cached tokens in usage.prompt_tokens_details").
	EnableCacheReport bool
	// Addr is the address to listen on ("": 127.0.0.1, any port). A
	// fixed one lets a test start Tandem first: SGLang's HTTP server
	// listens only once the schedulers have loaded the model
	// (http_server.py, launch_server: _launch_subprocesses returns with
	// the scheduler info, then uvicorn.run), so before that a client
	// meets a refused connection, not a 503.
	Addr string
}

// SGLang is a running SGLang look-alike: POST /generate (input_ids or
// text, sampling_params, data_parallel_rank, stream), GET /health,
// /v1/models, /get_model_info, /get_server_info, /metrics; KV events per
// DP rank over ZMQ.
type SGLang struct {
	opts  SGLangOptions
	ranks []*mocker.Engine
	srv   *http.Server
	lis   net.Listener
	rr    atomic.Uint64 // round-robin over ranks for requests without data_parallel_rank
	reqs  atomic.Int64
}

// StartSGLang starts DPSize mockers and serves on 127.0.0.1 (any port).
func StartSGLang(opts SGLangOptions) (*SGLang, error) {
	if opts.Model == "" {
		opts.Model = "standin-sglang"
	}
	if opts.DPSize <= 0 {
		opts.DPSize = 1
	}
	if opts.DPSize > 64 {
		return nil, fmt.Errorf("standin: dp size %d out of range", opts.DPSize)
	}
	s := &SGLang{opts: opts}
	ev := opts.Mocker.KVEvents
	var pubBase, replayBase int
	if ev.Enabled && !ev.Dial {
		var err error
		if pubBase, err = basePort(ev.Endpoint, opts.DPSize); err != nil {
			return nil, err
		}
		if ev.ReplayEndpoint != "" {
			if replayBase, err = basePort(ev.ReplayEndpoint, opts.DPSize); err != nil {
				return nil, err
			}
		}
	}
	for r := range opts.DPSize {
		cfg := opts.Mocker
		cfg.Model = opts.Model
		cfg.EngineLabel = fmt.Sprint(r)
		cfg.KVEvents.SGLang = true
		cfg.KVEvents.DataParallelRank = r
		if ev.Enabled && !ev.Dial {
			cfg.KVEvents.Endpoint = withPort(ev.Endpoint, pubBase+r)
			if ev.ReplayEndpoint != "" {
				cfg.KVEvents.ReplayEndpoint = withPort(ev.ReplayEndpoint, replayBase+r)
			}
		}
		eng, err := mocker.New(cfg)
		if err != nil {
			s.closeRanks()
			return nil, fmt.Errorf("standin: dp rank %d: %w", r, err)
		}
		s.ranks = append(s.ranks, eng)
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		s.closeRanks()
		return nil, fmt.Errorf("standin: %w", err)
	}
	s.lis = lis
	mux := http.NewServeMux()
	// /health: 200 with an empty body once the server is up
	// (http_server.py, health()).
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /get_model_info", s.modelInfo)
	mux.HandleFunc("GET /get_server_info", s.serverInfo)
	// /generate answers POST and PUT (@app.api_route(methods=["POST", "PUT"])).
	mux.HandleFunc("POST /generate", s.generate)
	mux.HandleFunc("PUT /generate", s.generate)
	mux.HandleFunc("POST /v1/completions", s.completions)
	if opts.Codec != nil {
		mux.HandleFunc("POST /tokenize", s.tokenize)
	}
	if opts.EnableMetrics {
		mux.HandleFunc("GET /metrics", s.metrics)
	}
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

// basePort returns ep's port, or for port 0 the first of n consecutive
// free ports (SGLang offsets the configured port by the rank, so the
// ranks' ports must be consecutive).
func basePort(ep string, n int) (int, error) {
	hostPort, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return 0, fmt.Errorf("standin: KV events endpoint %q: want tcp://host:port", ep)
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return 0, fmt.Errorf("standin: KV events endpoint %q: %w", ep, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p+n > 65535 {
		return 0, fmt.Errorf("standin: KV events endpoint %q: bad port", ep)
	}
	if p != 0 {
		return p, nil
	}
	if host == "*" {
		host = "127.0.0.1"
	}
	for range 50 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, fmt.Errorf("standin: %w", err)
		}
		base := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if base+n > 65535 {
			continue
		}
		free := true
		for i := 1; i < n && free; i++ {
			c, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(base+i)))
			if err != nil {
				free = false
				break
			}
			c.Close()
		}
		if free {
			return base, nil
		}
	}
	return 0, errors.New("standin: no run of free ports for the DP ranks")
}

func withPort(ep string, port int) string {
	i := strings.LastIndexByte(ep, ':')
	return ep[:i+1] + strconv.Itoa(port)
}

// URL is the server's base URL.
func (s *SGLang) URL() string { return "http://" + s.lis.Addr().String() }

// Rank is DP rank r's engine (its KV event endpoints).
func (s *SGLang) Rank(r int) *mocker.Engine { return s.ranks[r] }

// Requests counts /generate requests served.
func (s *SGLang) Requests() int64 { return s.reqs.Load() }

// Close stops the server and the engines.
func (s *SGLang) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	return errors.Join(err, s.closeRanks())
}

func (s *SGLang) closeRanks() error {
	var errs []error
	for _, e := range s.ranks {
		errs = append(errs, e.Close())
	}
	return errors.Join(errs...)
}

func (s *SGLang) contextLength() int { return s.ranks[0].Info().ContextLength }

// models: ModelCard (entrypoints/openai/protocol.py) with owned_by
// "sglang", root (the model path) and max_model_len (the context length).
func (s *SGLang) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{map[string]any{
		"id": s.opts.Model, "object": "model", "created": time.Now().Unix(), "owned_by": "sglang",
		"root": s.opts.Model, "max_model_len": s.contextLength()}}})
}

// tokenize: {"model", "prompt", "add_special_tokens"} → {"tokens",
// "count", "max_model_len"} (http_server.py /tokenize, TokenizeReqInput
// in entrypoints/openai/protocol.py). The stand-in's tokenizer adds no
// special tokens.
func (s *SGLang) tokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Prompt string `json:"prompt"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": err.Error()}})
		return
	}
	ids := s.opts.Codec.Encode(req.Prompt)
	writeJSON(w, http.StatusOK, map[string]any{"tokens": ids, "count": len(ids), "max_model_len": s.contextLength()})
}

// modelInfo: model_path, tokenizer_path, is_generation (http_server.py,
// get_model_info).
func (s *SGLang) modelInfo(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"model_path": s.opts.Model, "tokenizer_path": s.opts.Model, "is_generation": true})
}

// serverInfo: the server args flattened with the scheduler's info and the
// version (http_server.py, get_server_info: {**asdict(server_args),
// **scheduler_info, "version": ...}); the fields a router reads.
func (s *SGLang) serverInfo(w http.ResponseWriter, _ *http.Request) {
	ev := s.opts.Mocker.KVEvents
	var kvConfig any // None when --kv-events-config is not given
	if ev.Enabled {
		b, _ := json.Marshal(map[string]any{"publisher": "zmq", "endpoint": ev.Endpoint, "replay_endpoint": ev.ReplayEndpoint, "topic": ev.Topic})
		kvConfig = string(b) // the flag's JSON string, as given
	}
	cfg := s.ranks[0].Config()
	writeJSON(w, http.StatusOK, map[string]any{
		"model_path": s.opts.Model, "served_model_name": s.opts.Model, "tp_size": 1,
		"dp_size": s.opts.DPSize, "enable_dp_attention": s.opts.DPSize > 1,
		"page_size": cfg.BlockSize, "context_length": s.contextLength(), "stream_output": s.opts.StreamOutput,
		"enable_metrics": s.opts.EnableMetrics, "kv_events_config": kvConfig, "load_balance_method": "round_robin",
		"max_total_num_tokens": cfg.NumBlocks * cfg.BlockSize, "max_req_input_len": s.contextLength() - 1,
		"version": "0.5.4-standin",
	})
}

// metrics: the scheduler's gauges (metrics/collector.py,
// SchedulerMetricsCollector) with its labels: model_name, engine_type,
// tp_rank, pp_rank, and dp_rank under DP attention (one series per rank).
func (s *SGLang) metrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	type g struct{ name, help string }
	gauges := []g{{"sglang:num_running_reqs", "The number of running requests."},
		{"sglang:num_queue_reqs", "The number of requests in the waiting queue."},
		{"sglang:token_usage", "The token usage."}}
	for _, m := range gauges {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", m.name, m.help, m.name)
		for r, e := range s.ranks {
			l := e.Load()
			labels := fmt.Sprintf(`engine_type="unified",model_name=%q,pp_rank="0",tp_rank="0"`, s.opts.Model)
			if s.opts.DPSize > 1 {
				labels = fmt.Sprintf(`dp_rank="%d",`, r) + labels
			}
			var v float64
			switch m.name {
			case "sglang:num_running_reqs":
				v = float64(l.Running)
			case "sglang:num_queue_reqs":
				v = float64(l.Waiting)
			default:
				v = l.KVUsage
			}
			fmt.Fprintf(w, "%s{%s} %s\n", m.name, labels, strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
}

// generateReq is the part of GenerateReqInput (managers/io_struct.py) the
// look-alike reads; unknown fields are ignored as the dataclass's
// FastAPI binding does for extra keys.
type generateReq struct {
	Text             *string        `json:"text"`
	InputIDs         []engine.Token `json:"input_ids"`
	SamplingParams   *samplingReq   `json:"sampling_params"`
	RID              string         `json:"rid"`
	Stream           bool           `json:"stream"`
	DataParallelRank *int           `json:"data_parallel_rank"`
	// ReturnLogprob asks for the output tokens' logprobs in meta_info,
	// TopLogprobsNum for that many alternatives per position
	// (GenerateReqInput).
	ReturnLogprob  bool `json:"return_logprob"`
	TopLogprobsNum int  `json:"top_logprobs_num"`
}

// samplingReq is SamplingParams (sampling/sampling_params.py): the
// fields Tandem sends.
type samplingReq struct {
	MaxNewTokens *int           `json:"max_new_tokens"`
	MinNewTokens int            `json:"min_new_tokens"`
	Temperature  *float64       `json:"temperature"`
	TopP         *float64       `json:"top_p"`
	TopK         *int           `json:"top_k"`
	IgnoreEOS    bool           `json:"ignore_eos"`
	StopTokenIDs []engine.Token `json:"stop_token_ids"`
	// The grammar fields: strings (json_schema is the schema's JSON text,
	// not an object), at most one of them set (SamplingParams.verify:
	// "Only one of regex, json_schema, or ebnf can be set."). The
	// look-alike checks them and generates unconstrained.
	JSONSchema *string `json:"json_schema"`
	Regex      *string `json:"regex"`
	EBNF       *string `json:"ebnf"`
}

func countSet(ps ...*string) int {
	n := 0
	for _, p := range ps {
		if p != nil {
			n++
		}
	}
	return n
}

// sglangError writes the error shape of the /generate route: a
// ValueError becomes 400 {"error": {"message": ...}} (http_server.py,
// generate_request).
func sglangError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"message": msg}})
}

func (s *SGLang) generate(w http.ResponseWriter, r *http.Request) {
	var req generateReq
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&req); err != nil {
		sglangError(w, http.StatusBadRequest, err.Error())
		return
	}
	prompt := req.InputIDs
	switch {
	case req.Text == nil && req.InputIDs == nil:
		// GenerateReqInput._validate_inputs.
		sglangError(w, http.StatusBadRequest, "Either text, input_ids or input_embeds should be provided.")
		return
	case req.InputIDs != nil && len(req.InputIDs) == 0:
		sglangError(w, http.StatusBadRequest, "input_ids cannot be empty.")
		return
	case req.InputIDs == nil:
		if s.opts.Codec == nil {
			sglangError(w, http.StatusBadRequest, "text prompts need a tokenizer")
			return
		}
		prompt = s.opts.Codec.Encode(*req.Text)
	}
	sp := req.SamplingParams
	if sp == nil {
		sp = &samplingReq{}
	}
	if n := countSet(sp.JSONSchema, sp.Regex, sp.EBNF); n > 1 {
		sglangError(w, http.StatusBadRequest, "Only one of regex, json_schema, or ebnf can be set.")
		return
	}
	maxNew := 128 // SamplingParams.max_new_tokens default (sampling/sampling_params.py)
	if sp.MaxNewTokens != nil {
		maxNew = *sp.MaxNewTokens
	}
	if maxNew < 0 {
		sglangError(w, http.StatusBadRequest, fmt.Sprintf("max_new_tokens must be at least 0, got %d.", maxNew))
		return
	}
	if cl := s.contextLength(); len(prompt) >= cl {
		// TokenizerManager._validate_one_request.
		sglangError(w, http.StatusBadRequest, fmt.Sprintf("The input (%d tokens) is longer than the model's context length (%d tokens).", len(prompt), cl))
		return
	}
	rank := int(s.rr.Add(1)-1) % len(s.ranks) // DataParallelController: round_robin
	if dr := req.DataParallelRank; dr != nil {
		if *dr < 0 || *dr >= len(s.ranks) {
			sglangError(w, http.StatusBadRequest, fmt.Sprintf("data_parallel_rank %d out of range [0, %d)", *dr, len(s.ranks)))
			return
		}
		rank = *dr
	}
	rid := req.RID
	if rid == "" {
		rid = fmt.Sprintf("%032x", s.reqs.Add(1)) // uuid4().hex
	} else {
		s.reqs.Add(1)
	}
	maxNew = min(maxNew, s.contextLength()-len(prompt))
	if req.TopLogprobsNum < 0 || req.TopLogprobsNum > engine.MaxTopLogprobs {
		sglangError(w, http.StatusBadRequest, fmt.Sprintf("top_logprobs_num %d is out of range", req.TopLogprobsNum))
		return
	}
	st, err := s.ranks[rank].Generate(r.Context(), &engine.Request{ID: rid, Model: s.opts.Model, Prompt: prompt,
		MaxTokens: max(maxNew, 1), MinTokens: sp.MinNewTokens, IgnoreEOS: sp.IgnoreEOS, StopTokens: sp.StopTokenIDs,
		Logprobs: req.ReturnLogprob, TopLogprobs: req.TopLogprobsNum})
	if err != nil {
		sglangError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	start := time.Now()
	var out []engine.Token
	var lps []engine.TokenLogprob
	cached, sent := 0, 0
	// meta_info (tokenizer_manager.py, _handle_batch_output): id,
	// finish_reason (None until the end, then {"type": "length",
	// "length": n} or {"type": "stop", "matched": id}), prompt_tokens,
	// completion_tokens, cached_tokens — on every chunk.
	meta := func(finish engine.FinishReason) map[string]any {
		m := map[string]any{"id": rid, "finish_reason": nil, "prompt_tokens": len(prompt),
			"completion_tokens": len(out), "cached_tokens": cached}
		switch finish {
		case engine.FinishLength:
			m["finish_reason"] = map[string]any{"type": "length", "length": len(out)}
		case engine.FinishNone:
		default:
			var matched any
			if len(out) > 0 {
				matched = out[len(out)-1]
			}
			m["finish_reason"] = map[string]any{"type": "stop", "matched": matched}
		}
		if finish != engine.FinishNone {
			m["e2e_latency"] = time.Since(start).Seconds()
		}
		if req.ReturnLogprob {
			// Every output token so far as [logprob, token_id, text]
			// (text null without return_text_in_logprobs), and with
			// top_logprobs_num each position's alternatives in the same
			// form (tokenizer_manager.py, add_logprob_to_meta_info,
			// detokenize_logprob_tokens).
			tok := make([]any, len(lps))
			top := make([]any, len(lps))
			for i, lp := range lps {
				tok[i] = []any{lp.Logprob, lp.Token, nil}
				alts := make([]any, len(lp.Top))
				for k, t := range lp.Top {
					alts[k] = []any{t.Logprob, t.Token, nil}
				}
				top[i] = alts
			}
			m["output_token_logprobs"] = tok
			if req.TopLogprobsNum > 0 {
				m["output_top_logprobs"] = top
			}
		}
		return m
	}
	if !req.Stream {
		var finish engine.FinishReason
		out, lps, finish, cached = drainLogprobs(st)
		if finish == engine.FinishNone {
			finish = engine.FinishStop
		}
		writeJSON(w, http.StatusOK, map[string]any{"text": s.text(out), "output_ids": out, "meta_info": meta(finish)})
		return
	}
	// Streaming: "data: {json}\n\n" per chunk, then "data: [DONE]\n\n"
	// (http_server.py, stream_results).
	event := sseWriter(w)
	for {
		d, err := st.Recv()
		if err != nil {
			if r.Context().Err() == nil && !errors.Is(err, io.EOF) {
				event(map[string]any{"error": map[string]any{"message": err.Error()}})
			}
			break
		}
		if d.PromptTokens > 0 {
			cached = d.CachedTokens
		}
		out, lps = append(out, d.Tokens...), append(lps, d.Logprobs...)
		ids := out
		if s.opts.StreamOutput {
			ids = out[sent:]
		}
		sent = len(out)
		event(map[string]any{"text": s.text(out), "output_ids": ids, "meta_info": meta(d.Finish)})
		if d.Finish != engine.FinishNone {
			break
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (s *SGLang) text(toks []engine.Token) string {
	if s.opts.Codec == nil {
		return ""
	}
	return s.opts.Codec.Decode(toks)
}

// completions is SGLang's OpenAI API (entrypoints/openai/serving_completions.py):
// the same engine through the OpenAI protocol, with its quirks: text only
// (no token ids), max_tokens 16 when absent (protocol.py,
// CompletionRequest), usage only on a final chunk with "choices": [] when
// stream_options.include_usage, cached tokens only with
// --enable-cache-report.
func (s *SGLang) completions(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model         string          `json:"model"`
		Prompt        json.RawMessage `json:"prompt"`
		MaxTokens     *int            `json:"max_tokens"`
		Stream        bool            `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&req); err != nil {
		errorBody(w, http.StatusBadRequest, err.Error())
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
	maxTok := 16
	if req.MaxTokens != nil {
		maxTok = *req.MaxTokens
	}
	if cl := s.contextLength(); len(prompt)+maxTok > cl || len(prompt) == 0 {
		errorBody(w, http.StatusBadRequest, fmt.Sprintf("The input (%d tokens) is longer than the model's context length (%d tokens).", len(prompt), cl))
		return
	}
	s.reqs.Add(1)
	rank := int(s.rr.Add(1)-1) % len(s.ranks)
	st, err := s.ranks[rank].Generate(r.Context(), &engine.Request{Model: s.opts.Model, Prompt: prompt, MaxTokens: max(maxTok, 1)})
	if err != nil {
		errorBody(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	id := fmt.Sprintf("%032x", s.reqs.Load())
	cached, n := 0, 0
	usage := func() map[string]any {
		u := map[string]any{"prompt_tokens": len(prompt), "completion_tokens": n, "total_tokens": len(prompt) + n}
		if s.opts.EnableCacheReport {
			u["prompt_tokens_details"] = map[string]any{"cached_tokens": cached}
		}
		return u
	}
	choice := func(toks []engine.Token, f engine.FinishReason) map[string]any {
		c := map[string]any{"index": 0, "text": s.text(toks), "logprobs": nil, "finish_reason": nil, "matched_stop": nil}
		if f != engine.FinishNone {
			c["finish_reason"] = finishName(f)
		}
		return c
	}
	if !req.Stream {
		all, fin, c := drain(st)
		if fin == engine.FinishNone {
			fin = engine.FinishStop
		}
		cached = c
		n = len(all)
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "text_completion", "created": time.Now().Unix(), "model": s.opts.Model,
			"choices": []any{choice(all, fin)}, "usage": usage()})
		return
	}
	event := sseWriter(w)
	write := func(v map[string]any) {
		v["id"], v["object"], v["created"], v["model"] = id, "text_completion", time.Now().Unix(), s.opts.Model
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
		write(map[string]any{"choices": []any{choice(d.Tokens, d.Finish)}, "usage": nil})
		if d.Finish != engine.FinishNone {
			break
		}
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		write(map[string]any{"choices": []any{}, "usage": usage()})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}
