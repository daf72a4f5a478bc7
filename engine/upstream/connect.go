package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"

	"github.com/tandemllm/tandem/engine"
)

// TokenizerProbe is the fixed text whose tokenization Tandem compares with
// the server's own at connect: words, digits, punctuation, accents, CJK
// and an emoji, which tokenizers of different vocabularies split apart.
const TokenizerProbe = "Tandem tokenizer probe: The quick brown fox jumps over 13 lazy dogs; naïve café, 東京 🙂!"

// DiagTokenizerMismatch names a server whose tokenizer is not Tandem's:
// its token ids would be read as other words, so it is not routed to.
const DiagTokenizerMismatch = "upstream_tokenizer_mismatch"

// errTokenizerMismatch marks the refusal.
var errTokenizerMismatch = errors.New("tokenizer mismatch")

// checkTokenizer asks the server's POST /tokenize for TokenizerProbe and
// compares its ids with the Codec's. A server that sends token ids
// (every dialect but APIOpenAI) and reads Tandem's must share its
// vocabulary: with another one, every prompt is garbage to it. A server
// without /tokenize (404, 405, 501) cannot be checked: said once in the
// log, not refused.
//
// The shapes: llama.cpp {"content", "add_special"} → {"tokens"}
// (tools/server/README.md, POST /tokenize); vLLM and SGLang {"model",
// "prompt", "add_special_tokens"} → {"tokens", "count", "max_model_len"}
// (vllm/entrypoints/openai/protocol.py TokenizeRequest/TokenizeResponse;
// sglang http_server.py /tokenize).
func (e *Engine) checkTokenizer(ctx context.Context) error {
	if e.cfg.Codec == nil || e.cfg.API == APIOpenAI {
		return nil
	}
	var body any = map[string]any{"model": e.cfg.Model, "prompt": TokenizerProbe, "add_special_tokens": false}
	if e.cfg.API == APILlamaCpp {
		body = map[string]any{"content": TokenizerProbe, "add_special": false}
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("upstream: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.URL+"/tokenize", bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("upstream: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	e.auth(req)
	resp, err := e.cfg.Client.Do(req)
	if err != nil {
		return fmt.Errorf("upstream %s: %w: %w: %w", e.cfg.URL, engine.ErrUnavailable, errNotUp, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		e.cfg.Logger.Warn("the upstream server has no /tokenize: Tandem cannot check that its tokenizer (--model) is the server's",
			"url", e.cfg.URL, "status", resp.StatusCode)
		return nil
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return fmt.Errorf("upstream %s: %w: POST /tokenize: status %d", e.cfg.URL, errNotUp, resp.StatusCode)
	default:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return fmt.Errorf("upstream %s: POST /tokenize: status %d: %s", e.cfg.URL, resp.StatusCode, bytes.TrimSpace(b))
	}
	var out struct {
		Tokens      []engine.Token `json:"tokens"`
		MaxModelLen int            `json:"max_model_len"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out); err != nil {
		return fmt.Errorf("upstream %s: /tokenize: %w", e.cfg.URL, err)
	}
	want := e.cfg.Codec.Encode(TokenizerProbe)
	if !slices.Equal(out.Tokens, want) {
		return fmt.Errorf("upstream %s: %w: the server tokenizes a probe text as %d ids %v, Tandem's tokenizer as %d ids %v: "+
			"start Tandem with --model naming the server's model (its tokenizer.json or GGUF), or the server reads every prompt as other words",
			e.cfg.URL, errTokenizerMismatch, len(out.Tokens), head(out.Tokens), len(want), head(want))
	}
	return nil
}

func head(ids []engine.Token) []engine.Token {
	if len(ids) > 8 {
		return ids[:8]
	}
	return ids
}

// llamaContext reads a llama-server's context per slot: GET /props
// default_generation_settings.n_ctx (tools/server/README.md, GET /props:
// the slot's settings), else GET /slots' first n_ctx. 0: unknown. The
// GGUF's n_ctx_train (/v1/models meta) is the model's, not the server's:
// a server started with -c 4096 -np 2 holds 2048 per slot.
func (e *Engine) llamaContext(ctx context.Context) int {
	var props struct {
		Default struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	if e.getJSON(ctx, "/props", &props) == nil && props.Default.NCtx > 0 {
		return props.Default.NCtx
	}
	var slots []struct {
		NCtx int `json:"n_ctx"`
	}
	if e.getJSON(ctx, "/slots", &slots) == nil && len(slots) > 0 && slots[0].NCtx > 0 {
		return slots[0].NCtx
	}
	return 0
}

func (e *Engine) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.cfg.URL+path, nil)
	if err != nil {
		return err
	}
	e.auth(req)
	resp, err := e.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(v)
}

// maxContext bounds a context length a server reports.
const maxContext = 1 << 24

// learnContext sets the context from the server where the configuration
// and /v1/models did not: llama-server's slot context, SGLang's
// context_length.
func (e *Engine) learnContext(ctx context.Context) {
	if e.contextLength() > 0 {
		return
	}
	n := 0
	switch e.cfg.API {
	case APILlamaCpp:
		n = e.llamaContext(ctx)
	case APISGLang:
		n = e.sglang.ContextLength
	}
	if n > 0 && n <= maxContext {
		e.setInfo(e.Info().Model, n)
	}
}

// PromptTooLongError is a refusal for the prompt's own length (not the
// prompt plus max_tokens): the frontend names the prompt in its error.
type PromptTooLongError struct{ Err error }

func (e *PromptTooLongError) Error() string { return e.Err.Error() }
func (e *PromptTooLongError) Unwrap() error { return e.Err }

// PromptTooLong marks the error for the frontend.
func (e *PromptTooLongError) PromptTooLong() bool { return true }

// checkPrompt refuses a prompt that does not fit the server's context,
// before it is sent: an older llama-server truncates it silently, and the
// answer would then be to another prompt than the one counted.
func (e *Engine) checkPrompt(req *engine.Request) error {
	n := e.contextLength()
	if n <= 0 {
		return nil
	}
	if len(req.Prompt) >= n {
		return &PromptTooLongError{fmt.Errorf("upstream %s: %w: the prompt is %d tokens; the server's context is %d tokens",
			e.cfg.URL, engine.ErrPromptTooLong, len(req.Prompt), n)}
	}
	if req.MaxTokens > 0 && len(req.Prompt)+req.MaxTokens > n {
		return fmt.Errorf("upstream %s: %w: %d prompt + %d output tokens exceed the server's context of %d tokens",
			e.cfg.URL, engine.ErrPromptTooLong, len(req.Prompt), req.MaxTokens, n)
	}
	return nil
}
