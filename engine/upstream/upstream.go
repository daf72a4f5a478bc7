package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/openai"
)

// The engine's optional capabilities (package engine), checked at compile
// time so a renamed method cannot turn one off silently.
var (
	_ engine.Engine                     = (*Engine)(nil)
	_ engine.KVEventsPublisher          = (*Engine)(nil)
	_ engine.KVEventsReplayer           = (*Engine)(nil)
	_ engine.KVTransferProtocolReporter = (*Engine)(nil)
	_ engine.URLReporter                = (*Engine)(nil)
	_ engine.InfoNotifier               = (*Engine)(nil)
)

// Config configures an upstream engine.
type Config struct {
	// URL is the upstream's base URL (http://host:port).
	URL string
	// Model is the model name the upstream serves ("": the first one
	// /v1/models lists).
	Model string
	// APIKey, if set, is sent as Authorization: Bearer.
	APIKey string
	// BlockSize is the upstream's KV block size in tokens (vLLM
	// --block-size; default 16): the router hashes prompts in these.
	BlockSize int
	// ContextLength bounds prompt plus output (0: the max_model_len
	// /v1/models reports).
	ContextLength int
	// KVEventsEndpoint and KVEventsReplayEndpoint are where the upstream
	// publishes vLLM KV events over ZMQ ("": none), for the router.
	KVEventsEndpoint       string
	KVEventsReplayEndpoint string
	// Client sends the requests (nil: one with keep-alive connections).
	Client *http.Client
	// ProbeTimeout bounds New's /v1/models request and each health check
	// (default 10 s).
	ProbeTimeout time.Duration
	// HealthInterval is how often GET /health is polled (default 5 s;
	// negative: never). A failed request also checks at once.
	HealthInterval time.Duration
	// Logger receives the upstream_unavailable / upstream_recovered lines.
	Logger *slog.Logger
	// API is the dialect the server speaks: APIVLLM (default: token-id
	// prompts and vLLM's extensions) or APIOpenAI (any OpenAI-compatible
	// server: text prompts and standard fields only).
	API string
	// GuidedFields sends structured outputs as vLLM's older guided_json,
	// guided_regex, guided_choice and guided_grammar fields instead of
	// structured_outputs (vLLM releases before it).
	GuidedFields bool
	// Codec turns text into ids and back where the server speaks text: an
	// APIOpenAI prompt is sent as its text, and a response without
	// token_ids (vLLM before 0.10.2, SGLang's and llama.cpp's OpenAI APIs,
	// most OpenAI-compatible servers) is tokenized with it. nil: such
	// responses are refused (ErrNoTokenIDs).
	Codec Codec
	// DPRank is the attention-DP rank of an APISGLang server this engine
	// is (each rank is one worker; requests carry data_parallel_rank).
	DPRank int
	// DPRanksUnknown: the server's ranks were not known when the workers
	// were made (it did not answer, and --upstream-dp-size was not
	// given), so this engine is the whole server. If it has several
	// attention-DP ranks when it answers, requests go unpinned and
	// DiagDPRanksUnplanned is raised.
	DPRanksUnknown bool
	// DPSize is the attention-DP ranks the server was declared with
	// (--upstream-dp-size; 0: not declared): a server with another number
	// is refused at connect, as its ranks would not match the workers.
	DPSize int
	// MetricsInterval is how often the server's /metrics is scraped for
	// its load (default 2 s; negative: never). See load.go.
	MetricsInterval time.Duration
	// ConnectInterval is how often a server that did not answer at New
	// (down, or 503 "Loading model") is asked again (default 1 s).
	ConnectInterval time.Duration
}

// IdleConnTimeout is how long the default client keeps an idle
// connection: below the keep-alive of the common servers, so Tandem drops
// a connection before the server does and never sends a request into one
// the server is closing. llama-server's cpp-httplib closes after 5 s
// (CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND, its "Keep-Alive: timeout=5"
// header), vLLM's and SGLang's uvicorn after 5 s (timeout_keep_alive).
const IdleConnTimeout = 3 * time.Second

// NewClient is the default client: keep-alive connections, idle ones
// dropped after IdleConnTimeout.
func NewClient() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 256, IdleConnTimeout: IdleConnTimeout}}
}

// Codec is the part of a tokenizer the engine needs (tokenizer.Tokenizer
// satisfies it).
type Codec interface {
	Encode(text string) []engine.Token
	Decode(ids []engine.Token) string
}

// The dialects of Config.API.
const (
	APIVLLM   = "vllm"
	APIOpenAI = "openai"
)

// Diagnostic codes of an upstream server.
const (
	DiagUnavailable = "upstream_unavailable"
	DiagRecovered   = "upstream_recovered"
	// DiagNoCachedTokens: the server reports usage without
	// prompt_tokens_details (vLLM without --enable-prompt-tokens-details),
	// so the router cannot check its KV predictions; it is a diagnostic,
	// never a silent 0.
	DiagNoCachedTokens = "upstream_no_cached_tokens"
	// DiagModelUnknown: a server named without --upstream-model has not
	// answered, so the model it serves is not known yet; the worker
	// joins when it answers (cleared then).
	DiagModelUnknown = "upstream_model_unknown"
	// DiagDPRanksUnplanned: an SGLang server that did not answer at
	// start-up turned out to have several attention-DP ranks, but was
	// made one worker: its requests go to SGLang's own DP balancer and
	// only rank 0's KV events are followed until Tandem restarts with
	// --upstream-dp-size.
	DiagDPRanksUnplanned = "upstream_dp_ranks_unplanned"
)

// Engine is an upstream server behind the engine seam.
type Engine struct {
	cfg    Config
	info   engine.Info
	closed atomic.Bool

	stop  context.CancelFunc
	done  chan struct{}
	check chan struct{} // a failed request asks the watcher to look now

	mu      sync.Mutex
	board   *health.Board
	subject string
	down    error // non-nil while the server is unreachable
	// pending: the server has not answered New's probe yet (down or
	// loading); requests fail as unavailable until connect succeeds.
	pending atomic.Bool
	// ctxLen is the server's context length (0: unknown), learned at
	// connect; read by every request.
	ctxLen atomic.Int64

	// modelUnknown: New was given no model and the server did not
	// answer (set before any goroutine starts; read-only after).
	modelUnknown bool
	// unpinned: an SGLang server with more ranks than were planned
	// (Config.DPRanksUnknown): no data_parallel_rank is sent.
	unpinned atomic.Bool
	// changed is signalled when a late server's answer changed Info
	// (InfoChanged).
	changed chan struct{}

	textOnly  atomic.Bool // logged once: the server sends text without ids
	noDetails atomic.Bool // DiagNoCachedTokens raised

	slots *slots // APILlamaCpp: each prefix's slot

	sglang SGLangInfo // APISGLang: what /get_server_info said
	load   loadState  // the scraped /metrics (load.go)
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// New checks that the upstream answers and serves the model, and learns
// its context length.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	cfg.URL = strings.TrimRight(cfg.URL, "/")
	if cfg.URL == "" {
		return nil, errors.New("upstream: no URL")
	}
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 16
	}
	if cfg.Client == nil {
		cfg.Client = NewClient()
	}
	if cfg.ConnectInterval <= 0 {
		cfg.ConnectInterval = time.Second
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = 10 * time.Second
	}
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch cfg.API {
	case "":
		cfg.API = APIVLLM
	case APIVLLM, APILlamaCpp, APISGLang:
	case APIOpenAI:
		if cfg.Codec == nil {
			return nil, errors.New("upstream: --upstream-api openai needs a tokenizer (the prompt is sent as text)")
		}
	default:
		return nil, fmt.Errorf("upstream: unknown API %q (want %s, %s, %s or %s)", cfg.API, APIVLLM, APIOpenAI, APISGLang, APILlamaCpp)
	}
	e := &Engine{cfg: cfg, subject: cfg.URL, check: make(chan struct{}, 1), done: make(chan struct{}), slots: newSlots(), changed: make(chan struct{}, 1)}
	e.info = engine.Info{Kind: "upstream", Model: cfg.Model, BlockSize: cfg.BlockSize, ContextLength: cfg.ContextLength}
	e.ctxLen.Store(int64(cfg.ContextLength))
	if err := e.connect(ctx); err != nil {
		// A server that is down or still loading joins when it answers
		// (start-together orders: compose, pods). Without a model name,
		// the name is the server's once it answers (Info then changes;
		// InfoChanged). Any other answer (another model, a refusal) is a
		// configuration error.
		if !errors.Is(err, errNotUp) {
			return nil, err
		}
		e.down = err
		e.pending.Store(true)
		e.modelUnknown = cfg.Model == ""
		cfg.Logger.Warn("the upstream server does not answer yet; its worker is registered unavailable and joins when it answers",
			"diagnostic_code", DiagUnavailable, "url", cfg.URL, "model", cfg.Model, "err", err)
	}
	wctx, stop := context.WithCancel(context.Background())
	e.stop = stop
	go e.watch(wctx)
	e.startScrape(wctx)
	return e, nil
}

// errNotUp marks a probe failure that a later probe may not meet: the
// server does not answer, or answers 503 (llama-server's "Loading model",
// vLLM's and SGLang's start-up).
var errNotUp = errors.New("not up yet")

// connect probes the server: its model and context length, and (SGLang)
// its ranks and page size.
func (e *Engine) connect(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, e.cfg.ProbeTimeout)
	defer cancel()
	if err := e.probe(pctx); err != nil {
		return err
	}
	if e.cfg.API == APISGLang {
		if err := e.probeSGLang(pctx); err != nil {
			return err
		}
	}
	e.learnContext(pctx)
	return e.checkTokenizer(pctx)
}

// InfoChanged is signalled (once per change, coalesced) when a server
// that had not answered at New answers: its model name and context length
// (Info) are now the server's. The worker node re-reads Info then, so
// /v1/models and the frontend's length check follow the server.
func (e *Engine) InfoChanged() <-chan struct{} { return e.changed }

// modelUnknownMsg is DiagModelUnknown's /health detail.
const modelUnknownMsg = "the upstream server has not answered and no --upstream-model names its model: " +
	"its worker takes the server's model name when it answers; set --upstream-model (and --served-model-name) " +
	"so the name clients use does not depend on the server"

// unplanned raises DiagDPRanksUnplanned.
func (e *Engine) unplanned(b *health.Board, subject string) {
	msg := fmt.Sprintf("the SGLang server has %d attention-DP ranks but did not answer when the workers were made, so it is one worker: "+
		"its requests go to SGLang's own DP balancer and only rank 0's KV events are followed; restart Tandem with --upstream-dp-size %d",
		e.sglang.Ranks(), e.sglang.Ranks())
	if b != nil {
		b.Raise(DiagDPRanksUnplanned, subject, health.Warn, msg, "url", e.cfg.URL)
		return
	}
	e.cfg.Logger.Warn(msg, "diagnostic_code", DiagDPRanksUnplanned, "url", e.cfg.URL)
}

// Pending reports whether the server has not answered yet.
func (e *Engine) Pending() bool { return e.pending.Load() }

// AttachBoard reports the server's reachability on b under subject (the
// worker's id): a down server is a degraded state with a code, a log line,
// a metric and a /health detail, never only failed requests.
func (e *Engine) AttachBoard(b *health.Board, subject string) {
	e.mu.Lock()
	e.board, e.subject = b, subject
	down := e.down
	if e.modelUnknown && e.pending.Load() && b != nil {
		// Under mu: awaitConnect ends pending under it too, and then
		// clears what is raised here.
		b.Raise(DiagModelUnknown, subject, health.Warn, modelUnknownMsg, "url", e.cfg.URL)
	}
	e.mu.Unlock()
	if down != nil {
		e.raise(b, subject, down)
	}
	if e.unpinned.Load() {
		e.unplanned(b, subject)
	}
	if e.cfg.API == APILlamaCpp {
		e.noKVEvents(b, subject)
	}
}

func (e *Engine) raise(b *health.Board, subject string, err error) {
	msg := "the upstream server does not answer; requests to this worker fail and are retried elsewhere"
	if b != nil {
		b.Raise(DiagUnavailable, subject, health.Error, msg, "url", e.cfg.URL, "err", err.Error())
		return
	}
	e.cfg.Logger.Error(msg, "diagnostic_code", DiagUnavailable, "worker", subject, "url", e.cfg.URL, "err", err)
}

// watch polls GET /health (and looks at once after a failed request),
// raising DiagUnavailable when the server stops answering and clearing it
// when it answers again.
func (e *Engine) watch(ctx context.Context) {
	defer close(e.done)
	var tick <-chan time.Time
	if e.cfg.HealthInterval > 0 {
		t := time.NewTicker(e.cfg.HealthInterval)
		defer t.Stop()
		tick = t.C
	}
	if e.pending.Load() {
		if !e.awaitConnect(ctx) {
			return
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-e.check:
		}
		cctx, cancel := context.WithTimeout(ctx, e.cfg.ProbeTimeout)
		err := e.healthy(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		e.mu.Lock()
		was, b, subject := e.down, e.board, e.subject
		e.down = err
		e.mu.Unlock()
		switch {
		case err != nil && was == nil:
			e.raise(b, subject, err)
		case err == nil && was != nil:
			if b != nil {
				b.Clear(DiagUnavailable, subject, DiagRecovered, "the upstream server answers again")
			} else {
				e.cfg.Logger.Info("the upstream server answers again", "diagnostic_code", DiagRecovered, "worker", subject, "url", e.cfg.URL)
			}
		}
	}
}

// awaitConnect probes a server that was not up at New every
// ConnectInterval until it answers, then clears DiagUnavailable; false
// when ctx ended first. Requests refused meanwhile do not make it probe
// sooner: a flood of them must not become a flood of probes.
func (e *Engine) awaitConnect(ctx context.Context) bool {
	t := time.NewTicker(e.cfg.ConnectInterval)
	defer t.Stop()
	said := ""
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		err := e.connect(ctx)
		if ctx.Err() != nil {
			return false
		}
		e.mu.Lock()
		b, subject := e.board, e.subject
		if err != nil {
			e.down = err
			e.mu.Unlock()
			if !errors.Is(err, errNotUp) && err.Error() != said {
				// It answers, but not as configured (another model, another
				// tokenizer): say so once per change, and keep asking.
				said = err.Error()
				if errors.Is(err, errTokenizerMismatch) && b != nil {
					b.Raise(DiagTokenizerMismatch, subject, health.Error, err.Error(), "url", e.cfg.URL)
				} else {
					e.raise(b, subject, err)
				}
			}
			continue
		}
		e.down = nil
		e.pending.Store(false)
		e.mu.Unlock()
		info := e.Info()
		msg := fmt.Sprintf("the upstream server answers; its worker joins (model %s, context %d tokens)", info.Model, info.ContextLength)
		if b != nil {
			if said != "" {
				b.Clear(DiagTokenizerMismatch, subject, DiagRecovered, msg)
			}
			if e.modelUnknown {
				b.Clear(DiagModelUnknown, subject, DiagRecovered, msg)
			}
			b.Clear(DiagUnavailable, subject, DiagRecovered, msg)
		} else {
			e.cfg.Logger.Info(msg, "diagnostic_code", DiagRecovered, "worker", subject, "url", e.cfg.URL)
		}
		if e.unpinned.Load() {
			e.unplanned(b, subject)
		}
		select {
		case e.changed <- struct{}{}:
		default:
		}
		return true
	}
}

// healthy is vLLM's GET /health: 200 when the engine is alive.
func (e *Engine) healthy(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.cfg.URL+"/health", nil)
	if err != nil {
		return err
	}
	e.auth(req)
	resp, err := e.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// llama-server says why: 503 {"error":{"message":"Loading model"}}.
		var le struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &le) == nil && le.Error.Message != "" {
			return fmt.Errorf("GET /health: status %d: %s", resp.StatusCode, le.Error.Message)
		}
		return fmt.Errorf("GET /health: status %d", resp.StatusCode)
	}
	return nil
}

// suspect asks the watcher to check the server now.
func (e *Engine) suspect() {
	select {
	case e.check <- struct{}{}:
	default:
	}
}

// probe reads /v1/models: the model's name and, from vLLM, max_model_len.
func (e *Engine) probe(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.cfg.URL+"/v1/models", nil)
	if err != nil {
		return fmt.Errorf("upstream: %w", err)
	}
	e.auth(req)
	resp, err := e.cfg.Client.Do(req)
	if err != nil {
		return fmt.Errorf("upstream %s: %w: %w: %w", e.cfg.URL, engine.ErrUnavailable, errNotUp, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusBadGateway {
			return fmt.Errorf("upstream %s: %w: GET /v1/models: status %d: %s", e.cfg.URL, errNotUp, resp.StatusCode, bytes.TrimSpace(b))
		}
		return fmt.Errorf("upstream %s: GET /v1/models: status %d: %s", e.cfg.URL, resp.StatusCode, bytes.TrimSpace(b))
	}
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&list); err != nil {
		return fmt.Errorf("upstream %s: /v1/models: %w", e.cfg.URL, err)
	}
	names := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		names = append(names, m.ID)
		if e.cfg.Model == "" || m.ID == e.cfg.Model {
			// cfg.Model is empty only until the server first answers: in
			// New's probe, or in awaitConnect's while requests are refused
			// (pending), whose end orders this write before their reads.
			e.cfg.Model = m.ID
			n := e.cfg.ContextLength
			if n == 0 {
				n = m.MaxModelLen
			}
			e.setInfo(m.ID, n)
			return nil
		}
	}
	return fmt.Errorf("upstream %s serves %v, not model %q", e.cfg.URL, names, e.cfg.Model)
}

func (e *Engine) auth(r *http.Request) {
	if e.cfg.APIKey != "" {
		r.Header.Set("Authorization", "Bearer "+e.cfg.APIKey)
	}
}

// setInfo records what the server said: its model and context length.
func (e *Engine) setInfo(model string, ctxLen int) {
	e.mu.Lock()
	e.info = engine.Info{Kind: "upstream", Model: model, BlockSize: e.cfg.BlockSize, ContextLength: ctxLen}
	e.mu.Unlock()
	e.ctxLen.Store(int64(ctxLen))
}

// Info implements engine.Engine. A server that has not answered yet
// reports the configured model and context length.
func (e *Engine) Info() engine.Info {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.info
}

// contextLength is the server's context length (0: unknown).
func (e *Engine) contextLength() int { return int(e.ctxLen.Load()) }

// Close implements engine.Engine: later requests fail with ErrClosed;
// requests in flight finish (their contexts end them). The health watcher
// stops.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	e.stop()
	<-e.done
	e.load.wait()
	return nil
}

// KVTransferProtocol says how KV moves between upstream servers in
// prefill and decode roles: vLLM's own P/D protocol (kv_transfer_params;
// the servers run a KV connector such as NixlConnector).
func (e *Engine) KVTransferProtocol() string { return "vllm" }

// URL is the upstream's base URL.
func (e *Engine) URL() string { return e.cfg.URL }

// KVEventsEndpoint is where the upstream publishes KV events ("" none).
func (e *Engine) KVEventsEndpoint() string { return e.cfg.KVEventsEndpoint }

// KVEventsReplayEndpoint is the upstream's replay socket ("" none).
func (e *Engine) KVEventsReplayEndpoint() string { return e.cfg.KVEventsReplayEndpoint }

type streamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats,omitempty"`
}

// body is a /v1/completions request with vLLM's extensions (APIVLLM) or
// with the standard fields only (APIOpenAI: the extensions are all
// omitempty and left zero, since strict servers refuse unknown fields).
type body struct {
	Model            string          `json:"model"`
	Prompt           []engine.Token  `json:"-"` // spliced in by encode
	PromptText       string          `json:"prompt,omitempty"`
	MaxTokens        *int            `json:"max_tokens,omitempty"`
	MinTokens        int             `json:"min_tokens,omitempty"`
	IgnoreEOS        bool            `json:"ignore_eos,omitempty"`
	StopTokenIDs     []engine.Token  `json:"stop_token_ids,omitempty"`
	Temperature      float32         `json:"temperature"`
	TopP             float32         `json:"top_p,omitempty"`
	TopK             int             `json:"top_k,omitempty"`
	Seed             *int64          `json:"seed,omitempty"`
	Stream           bool            `json:"stream"`
	StreamOptions    *streamOptions  `json:"stream_options,omitempty"`
	ReturnTokenIDs   bool            `json:"return_token_ids,omitempty"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
	// Logprobs is completions' legacy logprobs (alternatives per
	// position), and ReturnTokensAsTokenIDs vLLM's option that names each
	// logprobs token "token_id:N" instead of its text
	// (vllm/entrypoints/openai/protocol.py, CompletionRequest), so ids
	// come back exactly.
	Logprobs               *int `json:"logprobs,omitempty"`
	ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids,omitempty"`
	// Structured outputs (structured.go).
	StructuredOutputs map[string]any  `json:"structured_outputs,omitempty"`
	GuidedJSON        json.RawMessage `json:"guided_json,omitempty"`
	GuidedRegex       string          `json:"guided_regex,omitempty"`
	GuidedChoice      json.RawMessage `json:"guided_choice,omitempty"`
	GuidedGrammar     string          `json:"guided_grammar,omitempty"`
}

// encode marshals b with its prompt written by hand: a prompt is
// thousands of ids, which encoding/json formats several times slower.
func (b *body) encode() ([]byte, error) {
	rest, err := json.Marshal(b)
	if err != nil || b.PromptText != "" {
		return rest, err
	}
	out := make([]byte, 0, len(rest)+12+8*len(b.Prompt))
	out = append(out, `{"prompt":[`...)
	for i, t := range b.Prompt {
		if i > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendInt(out, int64(t), 10)
	}
	out = append(out, "],"...)
	return append(out, rest[1:]...), nil
}

// Generate implements engine.Generator. It returns once the upstream has
// answered with a status, so refusals come back from here.
func (e *Engine) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	if e.closed.Load() {
		return nil, engine.ErrClosed
	}
	if e.pending.Load() {
		e.mu.Lock()
		down := e.down
		e.mu.Unlock()
		e.suspect()
		return nil, fmt.Errorf("upstream %s: %w: the server has not answered yet: %w", e.cfg.URL, engine.ErrUnavailable, down)
	}
	if err := e.checkPrompt(req); err != nil {
		return nil, err
	}
	switch e.cfg.API {
	case APILlamaCpp:
		return e.generateLlama(ctx, req)
	case APISGLang:
		return e.generateSGLang(ctx, req)
	}
	b := body{Model: e.cfg.Model, Prompt: req.Prompt, MinTokens: req.MinTokens,
		IgnoreEOS: req.IgnoreEOS, StopTokenIDs: req.StopTokens, Temperature: req.Sampling.Temperature,
		TopK: req.Sampling.TopK, ReturnTokenIDs: true, KVTransferParams: req.KVTransferParams}
	openAI := e.cfg.API == APIOpenAI
	if openAI {
		// The standard API: the prompt as text (a server with another
		// tokenizer would misread our ids), none of vLLM's fields.
		b = body{Model: e.cfg.Model, PromptText: e.cfg.Codec.Decode(req.Prompt), Temperature: req.Sampling.Temperature}
	}
	if err := e.vllmConstraint(&b, req.Constraint); err != nil {
		return nil, err
	}
	if tp := req.Sampling.TopP; tp > 0 && tp < 1 {
		b.TopP = tp
	}
	if req.Logprobs {
		if openAI {
			// A standard server names logprobs tokens by their text in
			// its own tokenizer: no ids to hand back.
			return nil, fmt.Errorf("upstream: %w: logprobs need a vLLM upstream (--upstream-api vllm): an OpenAI-compatible server returns token texts, not ids", engine.ErrInvalidRequest)
		}
		n := req.TopLogprobs
		b.Logprobs, b.ReturnTokensAsTokenIDs = &n, true
	}
	if req.Sampling.HasSeed {
		s := int64(req.Sampling.Seed & math.MaxInt64) // vLLM's seed is a signed 64-bit int
		b.Seed = &s
	}
	switch n := req.MaxTokens; {
	case n > 0:
		b.MaxTokens = &n
	case e.contextLength() > 0:
		// Ours means "up to the context length"; vLLM's completions
		// default is 16.
		n = max(e.contextLength()-len(req.Prompt), 1)
		b.MaxTokens = &n
	}
	// vLLM returns a prefill leg's kv_transfer_params only in a whole
	// response; everything else streams.
	b.Stream = !remoteDecode(req.KVTransferParams)
	if b.Stream {
		b.StreamOptions = &streamOptions{IncludeUsage: true, ContinuousUsageStats: !openAI}
	}
	payload, err := b.encode()
	if err != nil {
		return nil, fmt.Errorf("upstream: encode request: %w", err)
	}
	resp, err := e.post(ctx, "/v1/completions", payload, req.ID)
	if err != nil {
		return nil, err
	}
	if !b.Stream {
		defer resp.Body.Close()
		return e.whole(resp.Body, len(req.Prompt), lpTop(req))
	}
	st := newSSEStream(e, resp.Body, req)
	return &st, nil
}

// post sends a JSON request and returns a 200 response; a refusal is
// mapped by statusError, and an unreachable or failing server is checked
// by the health watcher at once.
func (e *Engine) post(ctx context.Context, path string, payload []byte, id string) (*http.Response, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.URL+path, bytes.NewReader(payload))
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	// Idempotent: a connection that the server closed before any byte of
	// the answer came back (a kept-alive connection it timed out as the
	// request went in) is retried on a fresh connection by the transport,
	// instead of failing the request and calling the server unreachable.
	// Regenerating is safe: nothing was answered. net/http retries a
	// request whose header has this key, sent with no value when empty
	// (net/http Transport, "Idempotency-Key").
	hr.Header["X-Idempotency-Key"] = nil
	if id != "" {
		hr.Header.Set("X-Request-Id", id)
	}
	e.auth(hr)
	resp, err := e.cfg.Client.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		e.suspect()
		return nil, fmt.Errorf("upstream %s: %w: %w", e.cfg.URL, engine.ErrUnavailable, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		err := statusError(e.cfg.URL, resp)
		if errors.Is(err, engine.ErrUnavailable) || errors.Is(err, errServerError) {
			e.suspect()
		}
		return nil, err
	}
	return resp, nil
}

// errServerError is a server's 5xx answer to one request.
var errServerError = errors.New("the server failed the request")

// remoteDecode reports whether kv_transfer_params ask for a prefill leg.
func remoteDecode(params json.RawMessage) bool {
	if len(params) == 0 {
		return false
	}
	var p struct {
		DoRemoteDecode bool `json:"do_remote_decode"`
	}
	return json.Unmarshal(params, &p) == nil && p.DoRemoteDecode
}

// statusError maps an upstream refusal to the engine's errors.
func statusError(url string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var e struct {
		Error struct {
			Message string `json:"message"`
			Code    any    `json:"code"`
			Type    string `json:"type"` // llama.cpp: exceed_context_size_error, ...
		} `json:"error"`
		Message string `json:"message"` // very old vLLM: a flat error object
	}
	_ = json.Unmarshal(b, &e)
	msg := e.Error.Message
	if msg == "" {
		msg = e.Message
	}
	if msg == "" {
		msg = string(bytes.TrimSpace(b))
	}
	code := fmt.Sprint(e.Error.Code)
	switch {
	case e.Error.Type == "exceed_context_size_error":
		return &PromptTooLongError{fmt.Errorf("upstream %s: %w: %s", url, engine.ErrPromptTooLong, msg)}
	case resp.StatusCode == http.StatusBadRequest && (strings.Contains(code, "context_length") ||
		strings.Contains(msg, "context length") || strings.Contains(msg, "maximum context")):
		return fmt.Errorf("upstream %s: %w: %s", url, engine.ErrPromptTooLong, msg)
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
		return fmt.Errorf("upstream %s: %w: %s", url, engine.ErrOverloaded, msg)
	case resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusGatewayTimeout:
		return fmt.Errorf("upstream %s: %w: status %d: %s", url, engine.ErrUnavailable, resp.StatusCode, msg)
	case resp.StatusCode >= 500:
		// One request's failure (a 500 from the handler) is that request's:
		// the server answers, so it is not called unavailable (the health
		// watcher still looks at once).
		return fmt.Errorf("upstream %s: %w: status %d: %s", url, errServerError, resp.StatusCode, msg)
	}
	return fmt.Errorf("upstream %s: status %d: %s", url, resp.StatusCode, msg)
}

// choice is the part of a completion (chunk) the engine reads.
type choice struct {
	Text         string         `json:"text"`
	TokenIDs     []engine.Token `json:"token_ids"`
	FinishReason *string        `json:"finish_reason"`
	Logprobs     *vllmLogprobs  `json:"logprobs"`
}

type completion struct {
	Choices          []choice        `json:"choices"`
	Usage            *openai.Usage   `json:"usage"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	Error            *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// ErrNoTokenIDs: the upstream sends text without ids and the engine has
// no Codec to tokenize it.
var ErrNoTokenIDs = errors.New("upstream returned text without token_ids and no tokenizer is configured to read it")

// apply adds one completion (chunk) to d; done reports a finish reason.
func (e *Engine) apply(c *completion, d *engine.Delta, promptLen int) (done bool, err error) {
	if c.Error != nil {
		return true, fmt.Errorf("upstream: %s", c.Error.Message)
	}
	if u := c.Usage; u != nil && u.PromptTokens > 0 {
		d.PromptTokens = u.PromptTokens
		// cached_tokens is read wherever the server puts it: on every
		// chunk (vLLM's continuous_usage_stats) or on the final usage
		// chunk only (include_usage: OpenAI, SGLang, older vLLM).
		if u.Details.Reported() {
			d.CachedTokens = u.Details.CachedTokens
		} else {
			e.noCachedTokens()
		}
	}
	if c.KVTransferParams != nil && !bytes.Equal(bytes.TrimSpace(c.KVTransferParams), []byte("null")) {
		d.KVTransferParams = c.KVTransferParams
	}
	if len(c.Choices) == 0 {
		return false, nil
	}
	ch := c.Choices[0]
	if ch.TokenIDs == nil && ch.Text != "" {
		// Text without ids: vLLM before 0.10.2 ignores return_token_ids
		// (vllm/entrypoints/openai/protocol.py gained it in v0.10.2), and
		// SGLang's, llama.cpp's and most OpenAI-compatible servers never
		// send ids. The ids are Tandem's tokenization of the text, which
		// the frontend detokenizes back to the same text.
		if e.cfg.Codec == nil {
			return true, ErrNoTokenIDs
		}
		if !e.textOnly.Swap(true) && e.cfg.API == APIVLLM {
			e.cfg.Logger.Info("the upstream returns text without token_ids (vLLM before 0.10.2?); tokenizing its text with Tandem's tokenizer",
				"url", e.cfg.URL)
		}
		d.Tokens = append(d.Tokens, e.cfg.Codec.Encode(ch.Text)...)
	}
	d.Tokens = append(d.Tokens, ch.TokenIDs...)
	if ch.FinishReason == nil {
		return false, nil
	}
	switch *ch.FinishReason {
	case "length":
		d.Finish = engine.FinishLength
	case "abort":
		d.Finish = engine.FinishCancelled
	default:
		d.Finish = engine.FinishStop
	}
	if d.PromptTokens == 0 {
		d.PromptTokens = promptLen
	}
	return true, nil
}

// noCachedTokens raises DiagNoCachedTokens once.
func (e *Engine) noCachedTokens() {
	if e.noDetails.Swap(true) {
		return
	}
	e.mu.Lock()
	b, subject := e.board, e.subject
	e.mu.Unlock()
	msg := "the upstream reports usage without prompt_tokens_details.cached_tokens; the router cannot check its KV predictions against this worker"
	switch e.cfg.API {
	case APIVLLM:
		msg += " (start vLLM with --enable-prompt-tokens-details)"
	default:
		msg += " (vLLM: --enable-prompt-tokens-details; SGLang: --enable-cache-report or --upstream-api sglang; llama-server: --upstream-api llamacpp, whose stop event has the count)"
	}
	if b != nil {
		b.Raise(DiagNoCachedTokens, subject, health.Warn, msg, "url", e.cfg.URL)
		return
	}
	e.cfg.Logger.Warn(msg, "diagnostic_code", DiagNoCachedTokens, "url", e.cfg.URL)
}

// whole reads an unstreamed response as one Delta.
func (e *Engine) whole(r io.Reader, promptLen, top int) (engine.Stream, error) {
	var c completion
	if err := json.NewDecoder(io.LimitReader(r, 64<<20)).Decode(&c); err != nil {
		return nil, fmt.Errorf("upstream: response: %w", err)
	}
	d := engine.Delta{}
	done, err := e.apply(&c, &d, promptLen)
	if err == nil {
		err = e.applyLogprobs(&c, &d, top)
	}
	if err != nil {
		return nil, err
	}
	if !done {
		d.Finish = engine.FinishStop
	}
	if d.PromptTokens == 0 {
		d.PromptTokens = promptLen
	}
	return &oneDelta{d: d}, nil
}

type oneDelta struct {
	d    engine.Delta
	sent bool
}

func (s *oneDelta) Recv() (engine.Delta, error) {
	if s.sent {
		return engine.Delta{}, io.EOF
	}
	s.sent = true
	return s.d, nil
}

// sseStream reads a streamed completion: each chunk with tokens is one
// Delta; usage-only chunks update the counts carried by the next Delta.
type sseStream struct {
	e         *Engine
	body      io.Closer
	r         *bufio.Reader
	promptLen int
	logprobs  bool          // the request asked for logprobs
	top       int           // and this many alternatives per position
	long      []byte        // a line longer than r's buffer, reassembled
	pending   engine.Delta  // counts from usage-only chunks
	final     *engine.Delta // the finish Delta, held for a trailing usage chunk
	sawUsage  bool
	done      bool
	started   bool
}

// sseReaders holds the streams' line readers: a 64 KB buffer allocated
// (and zeroed) per request was most of a streamed request's allocation in
// the frontend, and the collections it paid for.
var sseReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// newSSEStream reads body's events for req.
func newSSEStream(e *Engine, body io.ReadCloser, req *engine.Request) sseStream {
	r := sseReaders.Get().(*bufio.Reader)
	r.Reset(body)
	return sseStream{e: e, body: body, r: r, promptLen: len(req.Prompt), logprobs: req.Logprobs, top: req.TopLogprobs}
}

// finish ends the stream: the body is closed and the reader goes back to
// the pool (nothing read from it is referenced once Recv returns). A
// stream left unfinished (its request cancelled) keeps its reader.
func (s *sseStream) finish() {
	s.done = true
	s.body.Close()
	if s.r != nil {
		s.r.Reset(nil)
		sseReaders.Put(s.r)
		s.r = nil
	}
}

func (s *sseStream) fail(err error) (engine.Delta, error) {
	s.finish()
	return engine.Delta{}, err
}

// release returns the held finish Delta (once).
func (s *sseStream) release() (engine.Delta, error) {
	d := *s.final
	s.final = nil
	s.finish()
	return d, nil
}

// line reads one SSE line, bounded by openai.MaxSSELine (the first chunk
// carries the prompt's ids, return_token_ids), with its line ending cut.
// A last line without a newline is still a line; a stream that ends with
// no line is io.ErrUnexpectedEOF (every dialect's stream ends with an
// event of its own: [DONE], stop:true or a finish reason), wrapped.
func (s *sseStream) line() ([]byte, error) {
	line, err := openai.ReadSSELine(s.r, &s.long, openai.MaxSSELine)
	if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("upstream: stream: %w", err)
	}
	return bytes.TrimRight(line, "\r\n"), nil
}

func (s *sseStream) Recv() (engine.Delta, error) {
	for {
		if s.done {
			return engine.Delta{}, io.EOF
		}
		line, err := s.line()
		if err != nil {
			if s.final != nil {
				return s.release() // finished; only the usage chunk is missing
			}
			return s.fail(err)
		}
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // blank separators, comments, other fields
		}
		data = bytes.TrimSpace(data)
		if bytes.Equal(data, []byte("[DONE]")) {
			if s.final != nil {
				return s.release()
			}
			return s.fail(fmt.Errorf("upstream: stream ended without a finish reason: %w", io.ErrUnexpectedEOF))
		}
		var c completion
		if err := json.Unmarshal(data, &c); err != nil {
			return s.fail(fmt.Errorf("upstream: chunk: %w", err))
		}
		if c.Usage != nil && c.Usage.PromptTokens > 0 {
			s.sawUsage = true
		}
		if s.final != nil {
			// After the finish: the usage chunk (include_usage without
			// continuous stats) completes the counts.
			if _, err := s.e.apply(&c, s.final, s.promptLen); err != nil {
				return s.fail(err)
			}
			continue
		}
		d := s.pending
		done, err := s.e.apply(&c, &d, s.promptLen)
		if err == nil {
			err = s.e.applyLogprobs(&c, &d, s.lpTop())
		}
		if err != nil {
			return s.fail(err)
		}
		if len(d.Tokens) == 0 && !done {
			s.pending = engine.Delta{PromptTokens: d.PromptTokens, CachedTokens: d.CachedTokens, KVTransferParams: d.KVTransferParams}
			continue
		}
		s.pending = engine.Delta{}
		// A first Delta without usage leaves PromptTokens 0: the frontend
		// then takes cached_tokens from a later Delta (the final usage
		// chunk) instead of reporting 0 to the router.
		s.started = true
		if done && !s.sawUsage {
			s.final = &d
			continue
		}
		if done {
			s.finish()
		}
		return d, nil
	}
}
