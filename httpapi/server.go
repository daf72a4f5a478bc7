package httpapi

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tandemllm/tandem/dispatch"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/kvcache"
	"github.com/tandemllm/tandem/openai"
	"github.com/tandemllm/tandem/openai/responses"
	"github.com/tandemllm/tandem/tokenizer"
	"github.com/tandemllm/tandem/tracing"
)

// Config is the frontend's configuration.
type Config struct {
	// MaxBodyBytes bounds a request body (413 above it).
	MaxBodyBytes int64
	// RetryAfter is the Retry-After hint, in seconds, on 503s and 429s.
	RetryAfter int
	// MaxTokensDefault caps the tokens generated for a request that sets
	// no max_tokens (--max-tokens-default; 0: up to the context length).
	MaxTokensDefault int
	// MaxTokensLimit refuses requests asking for more tokens than this
	// (--max-tokens-limit; 0: only the context length bounds them).
	MaxTokensLimit int
	// MaxInflight is each model's concurrency limit (--max-inflight; 0: none)
	// and MaxQueue how many more requests may wait for a slot (--max-queue),
	// each at most QueueTimeout; past them a request is a 429.
	MaxInflight  int
	MaxQueue     int
	QueueTimeout time.Duration
	// AdmissionWait bounds how long a request that is not yet streaming
	// waits for an admission slot (--admission-wait; 0: QueueTimeout);
	// past it the request gets a 429 whose Retry-After is computed from
	// the model's observed completion rate, instead of waiting the whole
	// queue timeout for a slot that long streams will not free.
	AdmissionWait time.Duration
	// HTTP bounds connections, timeouts and request-body memory.
	HTTP HTTPLimits
	// APIKeys, if set, are the keys every /v1 request must present as
	// "Authorization: Bearer <key>" (--api-key-file); /health and /live
	// stay open for probes.
	APIKeys *APIKeys
	// ProtectMetrics puts /metrics behind the keys too (--protect-metrics).
	ProtectMetrics bool
	// TrustClientKVTransferParams passes a client's kv_transfer_params
	// (vLLM's P/D extension) to the engine (--trust-client-kv-transfer-params).
	// Off, a request carrying them is a 400 naming the field: the params
	// name network addresses (remote_host, remote_port) that a vLLM-protocol
	// worker would connect to with a transfer token, so only a proxy that
	// builds them itself may send them. A vLLM-compatible worker
	// (tandem worker --openai-addr --kv-transfer-params) trusts its proxy.
	TrustClientKVTransferParams bool
	// ResponsesStore bounds the /v1/responses store that previous_response_id
	// reads (--responses-store-size, --responses-store-bytes, --responses-store-ttl).
	ResponsesStore responses.StoreConfig
	// ToolCallParser and ReasoningParser name the chat parsers
	// (--tool-call-parser, --reasoning-parser; chatparse's names, "none"
	// for off); empty: detected from each model's chat template.
	ToolCallParser, ReasoningParser string
	// NoAccessLog turns off the info line per request (accesslog.go;
	// --access-log=false).
	NoAccessLog bool
}

// DefaultConfig returns the defaults the CLI flags start from.
func DefaultConfig() Config {
	return Config{MaxBodyBytes: 8 << 20, RetryAfter: 1, MaxTokensDefault: 4096,
		MaxInflight: 512, MaxQueue: 512, QueueTimeout: 30 * time.Second, AdmissionWait: time.Second, HTTP: DefaultHTTPLimits(),
		ResponsesStore: responses.DefaultStoreConfig()}
}

// Model is one served model as the frontend sees it.
type Model struct {
	*tokenizer.Model
	eos     []engine.Token
	metrics *modelMetrics
	adm     *admission
	parsers chatParsers // tool-call and reasoning parsers (chat.go)
}

// Server serves the OpenAI API. Create it with New.
type Server struct {
	cfg     Config
	d       *dispatch.Dispatcher
	board   *health.Board
	log     *slog.Logger
	metrics *metrics
	gather  prometheus.Gatherer
	created int64

	mu     sync.RWMutex
	models map[string]*Model

	draining atomic.Bool
	budget   *bodyBudget
	bufs     sync.Pool
	prefill  func() []PrefillWorker // nil: no disaggregation
	// responses holds finished /v1/responses for previous_response_id.
	responses *responses.Store
}

// New returns a Server that runs its requests through d. reg receives the
// frontend metrics and is what /metrics exposes.
func New(cfg Config, d *dispatch.Dispatcher, board *health.Board, reg *prometheus.Registry, log *slog.Logger) *Server {
	s := &Server{
		cfg: cfg, d: d, board: board, log: log,
		metrics: newMetrics(reg), gather: reg,
		created:   time.Now().Unix(),
		models:    map[string]*Model{},
		responses: responses.NewStore(cfg.ResponsesStore),
		budget: &bodyBudget{max: cfg.HTTP.BodyBudget, diag: flag{board: board, code: DiagBodyBudget, recovered: DiagBodyBudgetAvailable,
			msg: fmt.Sprintf("request bodies fill the server's %d-byte budget (--body-budget-bytes); new requests get 503", cfg.HTTP.BodyBudget)}},
	}
	s.bufs.New = func() any { b := make([]byte, 0, 4096); return &b }
	registerResponsesStore(reg, s.responses)
	return s
}

// AddModel makes m servable. Workers for it register with the router.
func (s *Server) AddModel(m *tokenizer.Model) {
	s.d.AddModel(m.Name)
	s.mu.Lock()
	defer s.mu.Unlock()
	rejected := s.metrics.admissionRejected
	s.models[m.Name] = &Model{Model: m, eos: m.Tokenizer.EOS(), metrics: s.metrics.forModel(m.Name),
		adm:     newAdmission(m.Name, s.cfg, s.board, func(reason string) { rejected.WithLabelValues(m.Name, reason).Inc() }),
		parsers: s.resolveParsers(m)}
}

func (s *Server) model(name string) *Model {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.models[name]
}

// SetDraining makes /health report 503 so load balancers stop sending new
// requests while in-flight ones finish.
func (s *Server) SetDraining() { s.draining.Store(true) }

// Handler returns the HTTP handler with every route.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// guard puts a route behind the API keys when they are configured.
	guard := func(h http.HandlerFunc) http.Handler {
		if s.cfg.APIKeys == nil {
			return h
		}
		return s.requireKey(h)
	}
	mux.Handle("POST /v1/chat/completions", guard(traced("/v1/chat/completions", s.accessLogged("chat", s.handleChat))))
	mux.Handle("POST /v1/completions", guard(traced("/v1/completions", s.accessLogged("completions", s.handleCompletion))))
	mux.Handle("GET /v1/models", guard(s.handleModels))
	mux.Handle("POST /tokenize", guard(traced("/tokenize", s.handleTokenize)))
	mux.Handle("POST /detokenize", guard(traced("/detokenize", s.handleDetokenize)))
	mux.Handle("POST /v1/responses", guard(traced("/v1/responses", s.accessLogged("responses", s.handleResponses))))
	mux.Handle("GET /v1/responses/{id}", guard(s.handleGetResponse))
	mux.Handle("DELETE /v1/responses/{id}", guard(s.handleDeleteResponse))
	mux.Handle("POST /v1/messages", guard(traced("/v1/messages", s.accessLogged("messages", s.handleMessages))))
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.HandleFunc("GET /live", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"live"}`)
	})
	metrics := promhttp.HandlerFor(s.gather, promhttp.HandlerOpts{})
	if s.cfg.ProtectMetrics {
		metrics = guard(metrics.ServeHTTP)
	}
	mux.Handle("GET /metrics", metrics)
	mux.Handle("/", guard(func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, &openai.Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: "no route for " + r.Method + " " + r.URL.Path})
	}))
	return mux
}

// job is one request on its way through the frontend.
type job struct {
	ctx      context.Context // the request's, with its span
	endpoint string
	chat     bool
	id       string
	model    *Model
	prompt   []engine.Token
	sampling *openai.Sampling
	start    time.Time
	chat_    *chatPlan // chat parsing (tools, reasoning); nil: none
}

func newRequestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 128 {
		return id
	}
	var b [12]byte
	for i := 0; i < len(b); i += 8 {
		v := rand.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return hex.EncodeToString(b[:])
}

func (s *Server) fail(w http.ResponseWriter, endpoint, model string, e *openai.Error) {
	s.metrics.requests.WithLabelValues(endpoint, model, strconv.Itoa(e.Status)).Inc()
	openai.WriteError(w, e)
}

// lookup resolves the model, or answers 404.
func (s *Server) lookup(w http.ResponseWriter, endpoint, name string) *Model {
	m := s.model(name)
	if m == nil {
		s.fail(w, endpoint, "", openai.NotFoundModel(name))
	}
	return m
}

// checkContentType refuses bodies that say they are not JSON, as OpenAI's
// API does. A request without Content-Type is read as JSON (curl -d sends
// form encoding unless told otherwise, and many scripts never set one).
func checkContentType(r *http.Request) *openai.Error {
	ct := r.Header.Get("Content-Type")
	if ct == "" || ct == "application/json" {
		return nil // the common cases, without parsing
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return &openai.Error{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Code: "unsupported_media_type",
		Message: fmt.Sprintf("Content-Type %q is not supported; send application/json", ct)}
}

// accept reads and decodes a request body and resolves its model. On any
// failure it has already answered, and ok is false.
func accept[R any](s *Server, w http.ResponseWriter, r *http.Request, endpoint string,
	decode func([]byte) (R, *openai.Error), model func(R) string) (req R, m *Model, ok bool) {
	if e := checkContentType(r); e != nil {
		s.fail(w, endpoint, "", e)
		return req, nil, false
	}
	body, release, e := s.readBody(w, r)
	if e == nil {
		req, e = decode(body)
	}
	release()
	if e != nil {
		s.fail(w, endpoint, "", e)
		return req, nil, false
	}
	m = s.lookup(w, endpoint, model(req))
	return req, m, m != nil
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	endpoint := chatEndpoint(r.Context())
	start := time.Now()
	req, m, ok := accept(s, w, r, endpoint, openai.DecodeChat, func(c *openai.ChatRequest) string { return c.Model })
	if !ok {
		return
	}
	_, tspan := child(r.Context(), tracing.SpanTemplate)
	text, err := m.Template.Render(tokenizer.ChatInput{Messages: req.Messages, Tools: req.Tools, Kwargs: templateKwargs(req), AddGenerationPrompt: true})
	tracing.EndWithError(tspan, err)
	if err != nil {
		s.fail(w, endpoint, m.Name, openai.BadRequest("messages", "template_error", "rendering the chat template: %v", err))
		return
	}
	plan, e := s.planChat(m, req, text)
	if e != nil {
		s.fail(w, endpoint, m.Name, e)
		return
	}
	if req.Constraint, e = toolCallsFormat(req.Constraint, plan); e != nil {
		s.fail(w, endpoint, m.Name, e)
		return
	}
	j := &job{ctx: r.Context(), endpoint: endpoint, chat: true, id: newRequestID(r), model: m, prompt: s.encodeTraced(r.Context(), m, text), sampling: &req.Sampling, start: start, chat_: plan}
	s.run(w, r, j, "messages")
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	const endpoint = "completions"
	start := time.Now()
	req, m, ok := accept(s, w, r, endpoint, openai.DecodeCompletion, func(c *openai.CompletionRequest) string { return c.Model })
	if !ok {
		return
	}
	prompt := req.PromptTokens
	if req.HasTokens {
		vocab := m.Tokenizer.VocabSize()
		for i, t := range prompt {
			if t < 0 || int(t) >= vocab {
				s.fail(w, endpoint, m.Name, openai.BadRequest(fmt.Sprintf("prompt[%d]", i), "invalid_value", "token id %d at position %d is outside the vocabulary (size %d)", t, i, vocab))
				return
			}
		}
	} else {
		prompt = s.encodeTraced(r.Context(), m, req.PromptText)
	}
	j := &job{ctx: r.Context(), endpoint: endpoint, id: newRequestID(r), model: m, prompt: prompt, sampling: &req.Sampling, start: start}
	s.run(w, r, j, "prompt")
}

// encodeTraced is encode inside a tokenize span.
func (s *Server) encodeTraced(ctx context.Context, m *Model, text string) []engine.Token {
	_, span := child(ctx, tracing.SpanTokenize)
	ids := s.encode(m, text)
	if span.IsRecording() {
		tracing.SetAttributes(span, attribute.Int(tracing.AttrPromptTokens, len(ids)))
	}
	span.End()
	return ids
}

func (s *Server) encode(m *Model, text string) []engine.Token {
	ids := m.Tokenizer.Encode(text)
	if bos, ok := m.Tokenizer.BOS(); ok && (len(ids) == 0 || ids[0] != bos) {
		ids = append([]engine.Token{bos}, ids...)
	}
	return ids
}

// maxNewTokens range-checks the requested output length against the
// per-request limit and the context, before any arithmetic (a max_tokens of
// 2^63-1 must be a 400, not a sum that wraps), and applies the default cap
// when the request sets none.
func (s *Server) maxNewTokens(j *job, promptParam string) (int, *openai.Error) {
	m := j.model
	asked := j.sampling.MaxNewTokens()
	param := "max_tokens"
	if j.sampling.MaxCompletionTokens != nil {
		param = "max_completion_tokens"
	}
	if lim := s.cfg.MaxTokensLimit; lim > 0 && asked > lim {
		return 0, openai.BadRequest(param, "invalid_value", "%s is %d; this server allows at most %d", param, asked, lim)
	}
	maxNew := asked
	if ctxLen := m.ContextLength; ctxLen > 0 {
		if len(j.prompt) >= ctxLen {
			return 0, openai.TooLarge(promptParam, "context_length_exceeded",
				"the prompt is %d tokens; this model's context length is %d tokens", len(j.prompt), ctxLen)
		}
		room := ctxLen - len(j.prompt)
		if asked > room {
			return 0, openai.BadRequest(param, "context_length_exceeded",
				"the prompt (%d tokens) plus %d requested tokens exceed the context length of %d tokens", len(j.prompt), asked, ctxLen)
		}
		if maxNew == 0 {
			maxNew = room
		}
	}
	if asked == 0 && s.cfg.MaxTokensDefault > 0 && (maxNew == 0 || maxNew > s.cfg.MaxTokensDefault) {
		maxNew = s.cfg.MaxTokensDefault
	}
	if j.sampling.MinTokens > maxNew && maxNew > 0 {
		return 0, openai.BadRequest("min_tokens", "invalid_value", "min_tokens (%d) exceeds the %d tokens this request may generate", j.sampling.MinTokens, maxNew)
	}
	return maxNew, nil
}

// run routes and serves a validated job.
func (s *Server) run(w http.ResponseWriter, r *http.Request, j *job, promptParam string) {
	m := j.model
	noteAccess(r.Context(), func(e *accessEntry) { e.id, e.model, e.in = j.id, m.Name, len(j.prompt) })
	if len(j.prompt) == 0 {
		s.fail(w, j.endpoint, m.Name, openai.BadRequest(promptParam, "invalid_value", "the prompt is empty"))
		return
	}
	maxNew, e := s.maxNewTokens(j, promptParam)
	if e != nil {
		s.fail(w, j.endpoint, m.Name, e)
		return
	}
	if j.sampling.KVTransferParams != nil && !s.cfg.TrustClientKVTransferParams {
		s.metrics.kvParamsRefused.Inc()
		s.fail(w, j.endpoint, m.Name, openai.BadRequest("kv_transfer_params", "unsupported_parameter",
			"kv_transfer_params are not accepted from clients here: they name addresses a worker would connect to (see --trust-client-kv-transfer-params)"))
		return
	}
	if vocab := m.Tokenizer.VocabSize(); vocab > 0 {
		for i, t := range j.sampling.StopTokenIDs {
			if int(t) >= vocab {
				s.fail(w, j.endpoint, m.Name, openai.BadRequest(fmt.Sprintf("stop_token_ids[%d]", i), "invalid_value", "token id %d is outside the vocabulary (size %d)", t, vocab))
				return
			}
		}
	}
	constraint, e := checkConstraint(j.sampling.Constraint)
	if e != nil {
		s.fail(w, j.endpoint, m.Name, e)
		return
	}
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
		tracing.SetAttributes(span, attribute.String(tracing.AttrRequestID, j.id), attribute.String(tracing.AttrModel, m.Name),
			attribute.Int(tracing.AttrPromptTokens, len(j.prompt)))
	}
	_, qspan := child(r.Context(), tracing.SpanQueue)
	release, e := m.adm.acquire(r.Context(), s.cfg.RetryAfter)
	if e != nil {
		tracing.EndWithError(qspan, e)
	} else {
		qspan.End()
	}
	if e != nil {
		s.fail(w, j.endpoint, m.Name, e)
		return
	}
	defer release()
	ereq := &engine.Request{
		ID: j.id, Model: m.Name, Prompt: j.prompt, MaxTokens: maxNew,
		MinTokens: j.sampling.MinTokens, IgnoreEOS: j.sampling.IgnoreEOS, StopTokens: j.sampling.StopTokenIDs,
		KVTransferParams: j.sampling.KVTransferParams, Constraint: constraint,
		Logprobs: j.sampling.WantLogprobs, TopLogprobs: j.sampling.TopLogprobsN,
	}
	if t := j.sampling.Temperature; t != nil {
		ereq.Sampling.Temperature = float32(*t)
	} else {
		ereq.Sampling.Temperature = 1
	}
	if p := j.sampling.TopP; p != nil {
		ereq.Sampling.TopP = float32(*p)
	}
	if k := j.sampling.TopK; k != nil && *k > 0 {
		ereq.Sampling.TopK = *k
	}
	if sd := j.sampling.Seed; sd != nil {
		ereq.Sampling.Seed, ereq.Sampling.HasSeed = uint64(*sd), true
	}
	var chat *chatState
	if j.chat_ != nil {
		chat = &chatState{plan: j.chat_}
		if err := chat.start(); err != nil {
			s.fail(w, j.endpoint, m.Name, openai.Internal("parser_error", "%v", err))
			return
		}
	}

	mm := m.metrics
	mm.isl.Observe(float64(len(j.prompt)))
	mm.inflight.Inc()
	mm.queued.Inc()
	queued := true
	defer func() {
		mm.inflight.Dec()
		if queued {
			mm.queued.Dec()
		}
	}()

	// The engine's context ends with the client's connection or with a
	// stop string, whichever is first.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	st, err := s.d.Generate(ctx, &dispatch.Request{Engine: ereq})
	if err != nil {
		var we *dispatch.WorkerError
		if errors.Is(err, dispatch.ErrNotRouted) {
			s.fail(w, j.endpoint, m.Name, s.routeError(m.Name, err))
			return
		}
		s.fail(w, j.endpoint, m.Name, s.engineError(err, promptParam))
		if errors.As(err, &we) {
			noteAccess(r.Context(), func(e *accessEntry) { e.worker = we.Worker })
		}
		return
	}
	defer st.Close()
	worker, first := st.Worker(), st.First()
	ttft := st.FirstTokenAt().Sub(j.start)
	mm.ttft.Observe(ttft.Seconds())
	mm.queued.Dec()
	queued = false
	late := st.LateUsage()
	if !late {
		mm.cached.Observe(float64(first.CachedTokens))
	}

	h := w.Header()
	h.Set("X-Request-Id", j.id)
	h.Set("X-Tandem-Worker", worker)

	out := &output{
		s: s, j: j, m: m, stream: st, ds: st, firstOK: true, cancel: cancel,
		detok:   tokenizer.NewDetokenizer(m.Tokenizer, tokenizer.SkipSpecial(), tokenizer.After(j.prompt[len(j.prompt)-1])),
		stop:    stopMatcher{stops: j.sampling.Stop},
		wantIDs: j.sampling.ReturnTokenIDs,
		wantLP:  j.sampling.WantLogprobs,
		chat:    chat,
	}
	if chat != nil && m.parsers.keep != nil {
		// The parser's marker tokens stay in its text.
		out.detok = tokenizer.NewDetokenizer(m.parsers.keep, tokenizer.SkipSpecial(), tokenizer.After(j.prompt[len(j.prompt)-1]))
	}
	// The other choices' contexts come from the request's, not from ctx:
	// choice 0 cancels ctx when a stop string ends it, which must not end
	// them.
	others, e := s.moreChoices(r.Context(), j, ereq, st)
	if e != nil {
		s.fail(w, j.endpoint, m.Name, e)
		return
	}
	_, sspan := child(ctx, tracing.SpanStream)
	status := http.StatusOK
	if j.sampling.Stream {
		out.stream_(w, others...)
	} else {
		status = out.collect(w, others...)
	}
	for _, c := range others {
		out.completion += c.completion // for the metrics and the log line
	}
	st.Close() // the router releases the request's load
	if late {
		mm.cached.Observe(float64(out.cached))
	}
	if sspan.IsRecording() {
		tracing.SetAttributes(sspan, attribute.Int(tracing.AttrOutputTokens, out.completion), attribute.String(tracing.AttrFinish, out.finish),
			attribute.Int(tracing.AttrCachedTokens, out.cached))
	}
	sspan.End()
	mm.osl.Observe(float64(out.completion))
	mm.duration.Observe(time.Since(j.start).Seconds())
	s.metrics.requests.WithLabelValues(j.endpoint, m.Name, strconv.Itoa(status)).Inc()
	noteAccess(r.Context(), func(e *accessEntry) {
		e.worker, e.out, e.cached, e.ttft, e.finish = st.Worker(), out.completion, first.CachedTokens, ttft, out.finish
		if late {
			e.cached = out.cached
		}
	})
	if s.log.Enabled(r.Context(), slog.LevelDebug) {
		s.log.DebugContext(ctx, "request done", "request_id", j.id, "worker", worker, "prompt_tokens", len(j.prompt),
			"cached_tokens", first.CachedTokens, "completion_tokens", out.completion, "finish", out.finish, "ttft", ttft)
	}
}

// moreChoices starts choices 1..n-1 of an n > 1 request on the worker that
// choice 0 was routed to, after choice 0's first token: its prompt's
// blocks are then in that engine's prefix cache, so the other choices
// share them instead of computing the prompt again (the native engine,
// the mocker and vLLM all cache prefixes). Each choice samples on its
// own: seed+i with a client seed (vLLM's ParentRequest gives child i
// seed+i), a fresh seed without one. A choice the worker refuses fails
// the request before its status line, with the worker's reason. Other
// choices do not migrate (--migration-limit) and are not counted again
// in the router's load (dispatch.Request.Pin).
func (s *Server) moreChoices(ctx context.Context, j *job, ereq *engine.Request, first *dispatch.Stream) ([]*output, *openai.Error) {
	n := j.sampling.NumChoices()
	if n <= 1 {
		return nil, nil
	}
	others := make([]*output, 0, n-1)
	for i := 1; i < n; i++ {
		req := *ereq
		req.ID = fmt.Sprintf("%s-%d", j.id, i)
		if req.Sampling.HasSeed {
			req.Sampling.Seed += uint64(i)
		} else {
			req.Sampling.Seed, req.Sampling.HasSeed = rand.Uint64(), true
		}
		cctx, cancel := context.WithCancel(ctx)
		st, err := s.d.Generate(cctx, &dispatch.Request{Engine: &req, Pin: first})
		if err != nil {
			cancel()
			promptParam := "prompt"
			if j.chat {
				promptParam = "messages"
			}
			return nil, s.engineError(fmt.Errorf("choice %d of n=%d: %w", i, n, err), promptParam)
		}
		c := &output{
			s: s, j: j, m: j.model, stream: st, ds: st, cancel: cancel, index: i, last: time.Now(),
			detok:   tokenizer.NewDetokenizer(j.model.Tokenizer, tokenizer.SkipSpecial(), tokenizer.After(j.prompt[len(j.prompt)-1])),
			stop:    stopMatcher{stops: j.sampling.Stop},
			wantIDs: j.sampling.ReturnTokenIDs,
			wantLP:  j.sampling.WantLogprobs,
		}
		if j.chat_ != nil {
			// Each choice parses its own text (tools, reasoning).
			c.chat = &chatState{plan: j.chat_}
			if err := c.chat.start(); err != nil {
				cancel()
				return nil, openai.Internal("parser_error", "%v", err)
			}
			if keep := j.model.parsers.keep; keep != nil {
				c.detok = tokenizer.NewDetokenizer(keep, tokenizer.SkipSpecial(), tokenizer.After(j.prompt[len(j.prompt)-1]))
			}
		}
		others = append(others, c)
	}
	return others, nil
}

func (s *Server) routeError(model string, err error) *openai.Error {
	if errors.Is(err, dispatch.ErrUnknownModel) {
		return openai.Unavailable("no_worker", s.cfg.RetryAfter, "no worker has registered model %q yet", model)
	}
	return openai.Unavailable("no_worker", s.cfg.RetryAfter, "no live worker serves model %q", model)
}

// promptTooLong is an engine refusal for the prompt's own length (the
// upstream engine's, against its server's context), named by promptParam
// rather than max_tokens.
type promptTooLong interface{ PromptTooLong() bool }

func (s *Server) engineError(err error, promptParam string) *openai.Error {
	switch {
	case errors.Is(err, dispatch.ErrFirstTokenTimeout):
		return &openai.Error{Status: http.StatusGatewayTimeout, Type: "timeout", Code: "first_token_timeout", Message: err.Error()}
	case errors.Is(err, engine.ErrOverloaded):
		return openai.Unavailable("overloaded", s.cfg.RetryAfter, "the worker is overloaded: %v", err)
	case errors.Is(err, engine.ErrPromptTooLong):
		if p := promptTooLong(nil); errors.As(err, &p) && p.PromptTooLong() {
			return openai.BadRequest(promptParam, "context_length_exceeded", "%v", err)
		}
		return openai.BadRequest("max_tokens", "context_length_exceeded", "%v", err)
	case errors.Is(err, engine.ErrInvalidRequest):
		return openai.BadRequest("", "invalid_value", "%v", err)
	case errors.Is(err, engine.ErrUnavailable), errors.Is(err, engine.ErrClosed):
		return openai.Unavailable("worker_unavailable", s.cfg.RetryAfter, "the worker is unavailable: %v", err)
	case errors.Is(err, context.Canceled):
		return &openai.Error{Status: 499, Type: "cancelled", Code: "client_closed_request", Message: "the client closed the request"}
	}
	return openai.Internal("engine_error", "generation failed: %v", err)
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	s.mu.RLock()
	list := openai.ModelList{Object: "list", Data: []openai.ModelCard{}}
	for _, m := range s.models {
		list.Data = append(list.Data, openai.ModelCard{ID: m.Name, Object: "model", Created: s.created, OwnedBy: "tandem", MaxModelLen: m.ContextLength})
	}
	s.mu.RUnlock()
	writeJSON(w, http.StatusOK, list)
}

type healthReport struct {
	Status  string         `json:"status"`
	Models  []modelHealth  `json:"models"`
	Workers []workerHealth `json:"workers"`
	// PrefillWorkers are the disaggregation prefill workers: not routed
	// to, so not in Workers.
	PrefillWorkers []PrefillWorker     `json:"prefill_workers,omitempty"`
	Diagnostics    []health.Diagnostic `json:"diagnostics"`
}

// PrefillWorker is a prefill worker as /health lists it.
type PrefillWorker struct {
	ID     string `json:"id"`
	Model  string `json:"model,omitempty"`
	Engine string `json:"engine,omitempty"`
	// Protocol is how its KV reaches decode workers: "tandem" (the
	// transfer plane) or "vllm" (vLLM's P/D protocol).
	Protocol string `json:"kv_protocol"`
}

// SetPrefillWorkers installs the source of /health's prefill workers
// (before the server is used).
func (s *Server) SetPrefillWorkers(f func() []PrefillWorker) { s.prefill = f }

type modelHealth struct {
	Name    string `json:"name"`
	Workers int    `json:"live_workers"`
	// Admission: requests holding a slot, waiting for one, the limit, and
	// whether requests are being refused (429) for want of one.
	Inflight    int  `json:"inflight"`
	Queued      int  `json:"queued"`
	MaxInflight int  `json:"max_inflight,omitempty"`
	Saturated   bool `json:"saturated"`
}

type workerHealth struct {
	ID     string `json:"id"`
	Model  string `json:"model"`
	Engine string `json:"engine"`
	// KVEvents is the worker's KV event stream state under the kv policies.
	KVEvents string `json:"kv_events,omitempty"`
	// KVEventsApplied and KVLastEventAgeSeconds show that the worker's
	// events, not approximation, route it (kv mode; age absent: no event
	// ever arrived).
	KVEventsApplied       uint64   `json:"kv_events_applied,omitempty"`
	KVLastEventAgeSeconds *float64 `json:"kv_last_event_age_seconds,omitempty"`
	// Stuck: it holds requests but produces nothing; the router skips it.
	Stuck bool `json:"stuck,omitempty"`
	// EngineQueue is the engine's own account of its queue, other
	// clients' requests included (an upstream server's /metrics), as the
	// kv costs read it; absent for engines without one or while unknown.
	EngineQueue *engineQueue `json:"engine_queue,omitempty"`
	// KVTiers are an in-process engine's KV tiers (pool, host memory,
	// disk), when it has lower ones.
	KVTiers []tierHealth `json:"kv_tiers,omitempty"`
	// KVSharedOnboardedBlocks counts the blocks it onboarded from other
	// workers' copies in a shared tier (a host's memory pool or disk).
	KVSharedOnboardedBlocks uint64 `json:"kv_shared_onboarded_blocks,omitempty"`
	// Memory is an in-process engine's memory (the native engine's).
	Memory *memoryHealth `json:"memory,omitempty"`
}

// memoryHealth is a worker's memory. The weights are the process's, held
// once however many workers share them (weights_shared_by): summing
// weights_bytes over workers counts them that many times. The KV cache is
// the worker's own, allocated at start (pages become resident as it
// fills).
type memoryHealth struct {
	WeightsBytes int64 `json:"weights_bytes"`
	// WeightsSharedBy is how many workers of the process share them.
	WeightsSharedBy int `json:"weights_shared_by"`
	// WeightsMappedBytes of them are read in place from the model file's
	// mapping (page cache); the rest were copied to the heap at load.
	WeightsMappedBytes int64  `json:"weights_mapped_bytes"`
	KVBytes            int64  `json:"kv_bytes"`
	KVTokens           int    `json:"kv_tokens"`
	KVSizedBy          string `json:"kv_sized_by,omitempty"`
}

// tierHealth is one KV tier of a worker: what it holds now and its
// traffic since start (blocks).
type tierHealth struct {
	Tier           string `json:"tier"`
	Blocks         int    `json:"blocks"`
	Bytes          int64  `json:"bytes,omitempty"`
	CapacityBlocks int    `json:"capacity_blocks,omitempty"`
	Offloaded      uint64 `json:"offloaded_blocks,omitempty"`
	Onboarded      uint64 `json:"onboarded_blocks,omitempty"`
	Dropped        uint64 `json:"dropped_blocks,omitempty"`
}

type engineQueue struct {
	Running    int     `json:"running"`
	Waiting    int     `json:"waiting"`
	AgeSeconds float64 `json:"age_seconds"`
}

// handleHealth is ready (200) when every model has a live worker and the
// server is not draining. Degraded diagnostics keep it 200 (the system still
// serves) but set status "degraded" and list them.
func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	rep := healthReport{Status: "ok"}
	if s.prefill != nil {
		rep.PrefillWorkers = s.prefill()
	}
	count := map[string]int{}
	for _, wk := range s.d.Workers() {
		count[wk.Model]++
		wh := workerHealth{ID: wk.ID, Model: wk.Model, Engine: wk.Engine, KVEvents: wk.KVEvents, Stuck: wk.Stuck}
		if q := wk.Queue; q != nil {
			wh.EngineQueue = &engineQueue{Running: q.Running, Waiting: q.Waiting, AgeSeconds: q.Age.Seconds()}
		}
		if ts := wk.Tiers; ts != nil {
			for t := range kvcache.NumTiers {
				wh.KVTiers = append(wh.KVTiers, tierHealth{Tier: t.String(), Blocks: ts.Blocks[t], Bytes: ts.Bytes[t], CapacityBlocks: ts.Capacity[t],
					Offloaded: ts.Offloaded[t], Onboarded: ts.Onboarded[t], Dropped: ts.Dropped[t]})
			}
			wh.KVSharedOnboardedBlocks = ts.SharedOnboarded
		}
		if m := wk.Memory; m != nil {
			wh.Memory = &memoryHealth{WeightsBytes: m.WeightsBytes, WeightsSharedBy: m.WeightsSharedBy, WeightsMappedBytes: m.WeightsMappedBytes,
				KVBytes: m.KVBytes, KVTokens: m.KVTokens, KVSizedBy: m.KVSizedBy}
		}
		if st := wk.Events; st != nil {
			wh.KVEventsApplied = st.Applied
			if st.LastAge >= 0 {
				age := st.LastAge.Seconds()
				wh.KVLastEventAgeSeconds = &age
			}
		}
		rep.Workers = append(rep.Workers, wh)
	}
	code := http.StatusOK
	s.mu.RLock()
	for name := range s.models {
		mh := modelHealth{Name: name, Workers: count[name], MaxInflight: s.cfg.MaxInflight}
		mh.Inflight, mh.Queued, mh.Saturated = s.models[name].adm.state()
		rep.Models = append(rep.Models, mh)
		if count[name] == 0 {
			rep.Status, code = "unavailable", http.StatusServiceUnavailable
		}
	}
	if len(s.models) == 0 {
		rep.Status, code = "unavailable", http.StatusServiceUnavailable
	}
	s.mu.RUnlock()
	rep.Diagnostics = s.board.Active() // after CheckStuck, which may raise
	if code == http.StatusOK && len(rep.Diagnostics) > 0 {
		rep.Status = "degraded"
	}
	if s.draining.Load() {
		rep.Status, code = "draining", http.StatusServiceUnavailable
	}
	writeJSON(w, code, rep)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		openai.WriteError(w, openai.Internal("encode_failed", "%v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
