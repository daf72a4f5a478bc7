package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
)

// TokenizeRequest is a POST /tokenize body as vLLM takes it
// (vllm/entrypoints/openai/protocol.py: TokenizeCompletionRequest, with
// prompt, or TokenizeChatRequest, with messages). Model may be left out
// when the server has one model.
type TokenizeRequest struct {
	Model  string  `json:"model"`
	Prompt *string `json:"prompt"`
	// Messages, Tools and ChatTemplateKwargs are rendered through the
	// model's chat template, as chat completions renders them.
	Messages             json.RawMessage            `json:"messages"`
	Tools                json.RawMessage            `json:"tools"`
	ChatTemplateKwargs   map[string]json.RawMessage `json:"chat_template_kwargs"`
	AddGenerationPrompt  *bool                      `json:"add_generation_prompt"`
	ContinueFinalMessage bool                       `json:"continue_final_message"`
	// AddSpecialTokens adds the model's BOS: true by default for a prompt,
	// false for messages (the template writes its own), as in vLLM.
	AddSpecialTokens *bool `json:"add_special_tokens"`
	ReturnTokenStrs  bool  `json:"return_token_strs"`
}

// Chat reports whether the request tokenizes messages.
func (r *TokenizeRequest) Chat() bool { return r.Messages != nil }

// SpecialTokens is add_special_tokens with vLLM's defaults applied.
func (r *TokenizeRequest) SpecialTokens() bool {
	if r.AddSpecialTokens != nil {
		return *r.AddSpecialTokens
	}
	return !r.Chat()
}

// GenerationPrompt is add_generation_prompt (default true).
func (r *TokenizeRequest) GenerationPrompt() bool {
	return r.AddGenerationPrompt == nil || *r.AddGenerationPrompt
}

// TokenizeResponse is vLLM's TokenizeResponse.
type TokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []int32  `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

// DetokenizeRequest is a POST /detokenize body (vLLM's DetokenizeRequest).
type DetokenizeRequest struct {
	Model  string          `json:"model"`
	Tokens json.RawMessage `json:"tokens"`
	// IDs is Tokens decoded by DecodeDetokenize.
	IDs []int32 `json:"-"`
}

// DetokenizeResponse is vLLM's DetokenizeResponse.
type DetokenizeResponse struct {
	Prompt string `json:"prompt"`
}

// DecodeTokenize parses and validates a /tokenize body: exactly one of
// prompt and messages; messages are normalized as chat's are.
func DecodeTokenize(body []byte) (*TokenizeRequest, *Error) {
	var r TokenizeRequest
	if e := decodeStrict(body, &r); e != nil {
		return nil, e
	}
	if bytes.Equal(bytes.TrimSpace(r.Messages), []byte("null")) {
		r.Messages = nil
	}
	switch {
	case r.Prompt != nil && r.Messages != nil:
		return nil, BadRequest("messages", "invalid_value", "send either prompt or messages, not both")
	case r.Prompt == nil && r.Messages == nil:
		return nil, BadRequest("prompt", "missing_field", "prompt (a string) or messages is required")
	}
	if r.Chat() {
		if r.ContinueFinalMessage {
			return nil, BadRequest("continue_final_message", "unsupported_value", "continue_final_message is not supported")
		}
		msgs, e := normalizeMessages(r.Messages)
		if e != nil {
			return nil, e
		}
		r.Messages = msgs
		if len(r.Tools) > 0 && !bytes.Equal(r.Tools, []byte("null")) {
			if e := checkTools(r.Tools); e != nil {
				return nil, e
			}
		} else {
			r.Tools = nil
		}
	}
	return &r, nil
}

// DecodeDetokenize parses a /detokenize body: tokens must be an array of
// non-negative integers that fit int32 (the vocabulary check is the
// server's, which knows the model).
func DecodeDetokenize(body []byte) (*DetokenizeRequest, *Error) {
	var r DetokenizeRequest
	if e := decodeStrict(body, &r); e != nil {
		return nil, e
	}
	t := bytes.TrimSpace(r.Tokens)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil, BadRequest("tokens", "missing_field", "tokens is required")
	}
	if bytes.Equal(t, []byte("[]")) {
		r.IDs = []int32{}
		return &r, nil
	}
	if ids, ok := plainTokenIDs(t); ok {
		r.IDs = ids
		return &r, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(t, &items); err != nil {
		return nil, BadRequest("tokens", "invalid_type", "tokens must be an array of token ids")
	}
	r.IDs = make([]int32, len(items))
	for i, it := range items {
		var v int64
		it = bytes.TrimSpace(it)
		if len(it) == 0 || it[0] < '0' || it[0] > '9' || json.Unmarshal(it, &v) != nil || v > math.MaxInt32 {
			return nil, BadRequest(fmt.Sprintf("tokens[%d]", i), "invalid_value", "token ids must be non-negative integers, got %.32s", it)
		}
		r.IDs[i] = int32(v)
	}
	return &r, nil
}
