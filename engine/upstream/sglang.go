package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/tandemllm/tandem/engine"
)

// APISGLang is SGLang's server, spoken through its native POST /generate
// (sgl-project/sglang python/sglang/srt/entrypoints/http_server.py;
// GenerateReqInput in managers/io_struct.py): token-id prompts
// (input_ids), so the router's token-level view is the server's;
// sampling_params; data_parallel_rank, so each attention-DP rank is its
// own routable worker; meta_info's cached_tokens on every chunk.
const APISGLang = "sglang"

// maxDPSize bounds the attention-DP ranks one server may report.
const maxDPSize = 1024

// SGLangInfo is what /get_server_info tells about a server: its server
// args flattened with the scheduler's info (http_server.py,
// get_server_info).
type SGLangInfo struct {
	DPSize            int    `json:"dp_size"`
	EnableDPAttention bool   `json:"enable_dp_attention"`
	PageSize          int    `json:"page_size"`
	ContextLength     int    `json:"context_length"`
	StreamOutput      bool   `json:"stream_output"`
	Version           string `json:"version"`
}

// Ranks is the number of routable targets the server is: one per
// attention-DP rank (each rank runs its own scheduler and radix cache and
// publishes its own KV events, disaggregation/kv_events.py), one without
// DP attention (plain --dp-size shares nothing either, but SGLang then
// routes inside; Tandem sees one server).
func (i SGLangInfo) Ranks() int {
	if i.EnableDPAttention && i.DPSize > 1 {
		return i.DPSize
	}
	return 1
}

// ProbeSGLang reads url's /get_server_info (bounded by ctx).
func ProbeSGLang(ctx context.Context, client *http.Client, url, apiKey string) (SGLangInfo, error) {
	var info SGLangInfo
	if client == nil {
		client = http.DefaultClient
	}
	url = strings.TrimRight(url, "/")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/get_server_info", nil)
	if err != nil {
		return info, fmt.Errorf("upstream: %w", err)
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		return info, fmt.Errorf("upstream %s: %w: %w: %w", url, engine.ErrUnavailable, errNotUp, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusBadGateway {
			return info, fmt.Errorf("upstream %s: %w: GET /get_server_info: status %d: %s", url, errNotUp, resp.StatusCode, bytes.TrimSpace(b))
		}
		return info, fmt.Errorf("upstream %s: GET /get_server_info: status %d: %s (is it an SGLang server?)", url, resp.StatusCode, bytes.TrimSpace(b))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&info); err != nil {
		return info, fmt.Errorf("upstream %s: /get_server_info: %w", url, err)
	}
	if info.DPSize < 0 || info.DPSize > maxDPSize || info.PageSize < 0 || info.ContextLength < 0 {
		return info, fmt.Errorf("upstream %s: /get_server_info: dp_size %d, page_size %d, context_length %d out of range",
			url, info.DPSize, info.PageSize, info.ContextLength)
	}
	return info, nil
}

// OffsetEndpointPort is SGLang's (and vLLM's) per-DP-rank endpoint:
// tcp://host:port becomes port + rank, inproc://x becomes x_dp{rank}, rank
// 0 unchanged (ZmqEventPublisher.offset_endpoint_port,
// disaggregation/kv_events.py). Other endpoints (a topic: on the bound
// socket) are returned as they are.
func OffsetEndpointPort(ep string, rank int) (string, error) {
	if ep == "" || rank == 0 {
		return ep, nil
	}
	if strings.HasPrefix(ep, "inproc://") {
		return fmt.Sprintf("%s_dp%d", ep, rank), nil
	}
	if !strings.HasPrefix(ep, "tcp://") {
		return ep, nil
	}
	i := strings.LastIndexByte(ep, ':')
	port, err := strconv.Atoi(ep[i+1:])
	if i < len("tcp://") || err != nil || port < 0 || port > 65535 || rank < 0 || port+rank > 65535 {
		return "", fmt.Errorf("upstream: endpoint %q offset by DP rank %d: bad port", ep, rank)
	}
	return ep[:i+1] + strconv.Itoa(port+rank), nil
}

// probeSGLang learns the server's stream mode and checks the rank and the
// page size against it.
func (e *Engine) probeSGLang(ctx context.Context) error {
	info, err := ProbeSGLang(ctx, e.cfg.Client, e.cfg.URL, e.cfg.APIKey)
	if err != nil {
		return err
	}
	if e.cfg.DPRanksUnknown && e.cfg.DPRank == 0 && info.Ranks() > 1 {
		// The server did not answer when the workers were made, so it is
		// one worker; it has more ranks. Its requests go without
		// data_parallel_rank, to SGLang's own DP balancer
		// (managers/data_parallel_controller.py: maybe_external_dp_rank_routing
		// pins a request only when data_parallel_rank is set; the others go
		// to --load-balance-method's scheduler, round_robin by default), and
		// only rank 0's KV events are followed: a degraded state, said.
		e.sglang = info
		e.unpinned.Store(true)
		return nil
	}
	if e.cfg.DPSize > 0 && info.Ranks() != e.cfg.DPSize {
		return fmt.Errorf("upstream %s: the server has %d attention-DP ranks, --upstream-dp-size says %d", e.cfg.URL, info.Ranks(), e.cfg.DPSize)
	}
	if e.cfg.DPRank < 0 || e.cfg.DPRank >= info.Ranks() {
		return fmt.Errorf("upstream %s: DP rank %d, but the server has %d attention-DP ranks", e.cfg.URL, e.cfg.DPRank, info.Ranks())
	}
	if info.PageSize > 0 && info.PageSize != e.cfg.BlockSize {
		// The router hashes prompts in --block-size blocks and SGLang's
		// events are page_size blocks: different sizes never match.
		return fmt.Errorf("upstream %s: SGLang's --page-size is %d, Tandem's --block-size %d: they must be equal", e.cfg.URL, info.PageSize, e.cfg.BlockSize)
	}
	e.sglang = info
	return nil
}

type sglangSampling struct {
	MaxNewTokens int            `json:"max_new_tokens"`
	MinNewTokens int            `json:"min_new_tokens,omitempty"`
	Temperature  float32        `json:"temperature"`
	TopP         float32        `json:"top_p,omitempty"`
	TopK         int            `json:"top_k,omitempty"`
	IgnoreEOS    bool           `json:"ignore_eos,omitempty"`
	StopTokenIDs []engine.Token `json:"stop_token_ids,omitempty"`
	SamplingSeed *int64         `json:"sampling_seed,omitempty"`
	JSONSchema   string         `json:"json_schema,omitempty"`
	Regex        string         `json:"regex,omitempty"`
	EBNF         string         `json:"ebnf,omitempty"`
}

type sglangBody struct {
	InputIDs         []engine.Token `json:"input_ids"`
	SamplingParams   sglangSampling `json:"sampling_params"`
	Stream           bool           `json:"stream"`
	DataParallelRank *int           `json:"data_parallel_rank,omitempty"`
	// ReturnLogprob, TopLogprobsNum and LogprobStartLen ask for the output
	// tokens' logprobs (LogprobStartLen -1: none of the prompt's), in
	// meta_info (GenerateReqInput, managers/io_struct.py).
	ReturnLogprob   bool `json:"return_logprob,omitempty"`
	TopLogprobsNum  int  `json:"top_logprobs_num,omitempty"`
	LogprobStartLen *int `json:"logprob_start_len,omitempty"`
}

// sglangChunk is one /generate answer or stream event.
type sglangChunk struct {
	Text      *string        `json:"text"`
	OutputIDs []engine.Token `json:"output_ids"`
	MetaInfo  *struct {
		FinishReason *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"finish_reason"`
		PromptTokens int  `json:"prompt_tokens"`
		CachedTokens *int `json:"cached_tokens"`
		// OutputTokenLogprobs holds [logprob, token_id, text] per output
		// token and OutputTopLogprobs a list of those per position.
		OutputTokenLogprobs []json.RawMessage `json:"output_token_logprobs"`
		OutputTopLogprobs   []json.RawMessage `json:"output_top_logprobs"`
	} `json:"meta_info"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func (e *Engine) generateSGLang(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	b := sglangBody{InputIDs: req.Prompt, Stream: true, SamplingParams: sglangSampling{
		MinNewTokens: req.MinTokens, Temperature: req.Sampling.Temperature, TopK: req.Sampling.TopK,
		IgnoreEOS: req.IgnoreEOS, StopTokenIDs: req.StopTokens}}
	if err := sglangConstraint(&b.SamplingParams, req.Constraint); err != nil {
		return nil, err
	}
	if tp := req.Sampling.TopP; tp > 0 && tp < 1 {
		b.SamplingParams.TopP = tp
	}
	if req.Sampling.HasSeed {
		s := int64(req.Sampling.Seed & 0x7fffffffffffffff)
		b.SamplingParams.SamplingSeed = &s
	}
	switch n := req.MaxTokens; {
	case n > 0:
		b.SamplingParams.MaxNewTokens = n
	case e.contextLength() > 0:
		// Ours means "up to the context length"; SGLang's default is 128.
		b.SamplingParams.MaxNewTokens = max(e.contextLength()-len(req.Prompt), 1)
	default:
		b.SamplingParams.MaxNewTokens = 128
	}
	if e.sglang.Ranks() > 1 && !e.unpinned.Load() {
		r := e.cfg.DPRank
		b.DataParallelRank = &r
	}
	if req.Logprobs {
		start := -1
		b.ReturnLogprob, b.TopLogprobsNum, b.LogprobStartLen = true, req.TopLogprobs, &start
	}
	payload, err := json.Marshal(&b)
	if err != nil {
		return nil, fmt.Errorf("upstream: encode request: %w", err)
	}
	resp, err := e.post(ctx, "/generate", payload, req.ID)
	if err != nil {
		return nil, err
	}
	return &sglangStream{sseStream: newSSEStream(e, resp.Body, req), whole: !e.sglang.StreamOutput}, nil
}

// sglangStream reads /generate's stream: "data: {json}" events and
// "data: [DONE]". Without --stream-output every event carries the whole
// text and all output_ids so far (tokenizer_manager.py), so the engine
// keeps how many it has passed on and sends the rest.
type sglangStream struct {
	sseStream
	whole    bool // output_ids are cumulative
	got      int  // output ids passed on
	textSeen int  // bytes of cumulative text passed on (servers without output_ids)
	finished bool
}

func (s *sglangStream) Recv() (engine.Delta, error) {
	for {
		if s.done {
			return engine.Delta{}, io.EOF
		}
		line, err := s.line()
		if err != nil {
			return s.fail(err)
		}
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if bytes.Equal(data, []byte("[DONE]")) {
			s.finish()
			if !s.finished {
				return engine.Delta{}, fmt.Errorf("upstream: stream ended without a finish reason: %w", io.ErrUnexpectedEOF)
			}
			return engine.Delta{}, io.EOF
		}
		var c sglangChunk
		if err := json.Unmarshal(data, &c); err != nil {
			return s.fail(fmt.Errorf("upstream: chunk: %w", err))
		}
		if c.Error != nil {
			return s.fail(fmt.Errorf("upstream %s: %s", s.e.cfg.URL, c.Error.Message))
		}
		if s.finished {
			continue // nothing follows a finish but [DONE]
		}
		var d engine.Delta
		switch {
		case c.OutputIDs != nil && s.whole:
			if len(c.OutputIDs) < s.got {
				return s.fail(fmt.Errorf("upstream: output_ids went from %d to %d ids", s.got, len(c.OutputIDs)))
			}
			d.Tokens = c.OutputIDs[s.got:]
		case c.OutputIDs != nil:
			d.Tokens = c.OutputIDs
		case c.Text != nil:
			// An older server without output_ids: the text is cumulative
			// too; Tandem tokenizes what is new.
			if s.e.cfg.Codec == nil {
				return s.fail(ErrNoTokenIDs)
			}
			if len(*c.Text) < s.textSeen {
				return s.fail(errors.New("upstream: the streamed text shrank"))
			}
			d.Tokens = s.e.cfg.Codec.Encode((*c.Text)[s.textSeen:])
			s.textSeen = len(*c.Text)
		}
		if m := c.MetaInfo; m != nil && s.logprobs && len(d.Tokens) > 0 {
			lps, err := sglangLogprobs(m.OutputTokenLogprobs, m.OutputTopLogprobs, len(d.Tokens), s.top)
			if err != nil {
				return s.fail(err)
			}
			d.Logprobs = lps
		}
		s.got += len(d.Tokens)
		if m := c.MetaInfo; m != nil {
			if m.PromptTokens > 0 {
				// prompt_tokens and cached_tokens ride on every chunk,
				// as vLLM's continuous usage does: the first lets the
				// router check its prediction at once.
				d.PromptTokens = m.PromptTokens
				if m.CachedTokens != nil {
					d.CachedTokens = *m.CachedTokens
				}
			}
			if f := m.FinishReason; f != nil {
				switch f.Type {
				case "length":
					d.Finish = engine.FinishLength
				case "abort":
					if f.Message != "" && len(d.Tokens) == 0 && !s.started {
						return s.fail(fmt.Errorf("upstream %s: %w: %s", s.e.cfg.URL, engine.ErrOverloaded, f.Message))
					}
					d.Finish = engine.FinishCancelled
				default: // "stop"
					d.Finish = engine.FinishStop
				}
				s.finished = true
				if d.PromptTokens == 0 && !s.started {
					d.PromptTokens = s.promptLen
				}
			}
		}
		if len(d.Tokens) == 0 && d.Finish == engine.FinishNone {
			continue
		}
		s.started = true
		return d, nil
	}
}
