package openai

import "encoding/json"

// ChatResponse is a non-streaming chat completion.
type ChatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   Usage        `json:"usage"`
	// PromptTokenIDs is vLLM's return_token_ids extension, present only
	// when the request asked for it: the prompt as the engine saw it (the
	// rendered chat template, tokenized). At the top level, as vLLM sends
	// it for chat.
	PromptTokenIDs []int32 `json:"prompt_token_ids,omitzero"`
	// KVTransferParams is vLLM's top-level P/D extension, present only when
	// the engine set it (a prefill leg's answer).
	KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
}

// ChatChoice is one choice of a ChatResponse.
type ChatChoice struct {
	Index        int              `json:"index"`
	Message      AssistantMessage `json:"message"`
	Logprobs     RawLogprobs      `json:"logprobs"`
	FinishReason string           `json:"finish_reason"`
	// TokenIDs is vLLM's return_token_ids extension: every generated token
	// id of the choice, EOS included. Absent (nil) unless requested; an
	// empty non-nil slice is sent as [].
	TokenIDs []int32 `json:"token_ids,omitzero"`
}

// AssistantMessage is the generated message (written by MarshalJSON in
// tools.go: content null beside tool calls).
type AssistantMessage struct {
	Role             string     `json:"role"`
	Content          string     `json:"content"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// CompletionResponse is a non-streaming text completion.
type CompletionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   Usage              `json:"usage"`
	// KVTransferParams: as ChatResponse's.
	KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
}

// CompletionChoice is one choice of a CompletionResponse.
type CompletionChoice struct {
	Index        int         `json:"index"`
	Text         string      `json:"text"`
	Logprobs     RawLogprobs `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
	// PromptTokenIDs and TokenIDs are vLLM's return_token_ids extension,
	// per choice for completions: the prompt's ids and the generated ids
	// (EOS included). Absent (nil) unless requested.
	PromptTokenIDs []int32 `json:"prompt_token_ids,omitzero"`
	TokenIDs       []int32 `json:"token_ids,omitzero"`
}

// ModelList is the GET /v1/models body.
type ModelList struct {
	Object string      `json:"object"`
	Data   []ModelCard `json:"data"`
}

// ModelCard describes one model.
type ModelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// MaxModelLen is vLLM's extension; clients use it to size prompts.
	MaxModelLen int `json:"max_model_len,omitempty"`
}
