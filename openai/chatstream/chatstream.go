// Package chatstream is the chat completions pipeline as the API
// translators (/v1/responses, Anthropic's /v1/messages) see it: the chat
// request they build, and the streamed chat chunks they read back, in
// OpenAI's shapes (delta.content, delta.reasoning_content,
// delta.tool_calls[{index,id,type,function{name,arguments}}], finish_reason,
// the include_usage chunk). The translators run the chat path unchanged
// and only rewrite its input and output, so every limit, metric and trace
// of chat applies to them.
package chatstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tandemllm/tandem/openai"
)

// Request is the chat completions body a translator sends. The pipeline
// always streams with usage, whatever the client asked for: the
// translator collects the stream when its own client wants one object.
type Request struct {
	Model               string                     `json:"model"`
	Messages            []Message                  `json:"messages"`
	Tools               []Tool                     `json:"tools,omitempty"`
	ToolChoice          json.RawMessage            `json:"tool_choice,omitempty"`
	ParallelToolCalls   *bool                      `json:"parallel_tool_calls,omitempty"`
	ResponseFormat      json.RawMessage            `json:"response_format,omitempty"`
	ReasoningEffort     string                     `json:"reasoning_effort,omitempty"`
	ChatTemplateKwargs  map[string]json.RawMessage `json:"chat_template_kwargs,omitempty"`
	MaxCompletionTokens *int                       `json:"max_completion_tokens,omitempty"`
	Temperature         *float64                   `json:"temperature,omitempty"`
	TopP                *float64                   `json:"top_p,omitempty"`
	TopK                *int                       `json:"top_k,omitempty"`
	Seed                *int64                     `json:"seed,omitempty"`
	Stop                []string                   `json:"stop,omitempty"`
	User                string                     `json:"user,omitempty"`
	Logprobs            bool                       `json:"logprobs,omitempty"`
	TopLogprobs         *int                       `json:"top_logprobs,omitempty"`
	Stream              bool                       `json:"stream"`
	StreamOptions       *openai.StreamOptions      `json:"stream_options,omitempty"`
}

// Message is one chat message. Content is a JSON string, or null for an
// assistant turn that only calls tools.
type Message struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID       string          `json:"tool_call_id,omitempty"`
}

// Text returns a message content holding s.
func Text(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string: cannot fail
	return b
}

// ToolCall is an assistant message's tool call.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is a called function: arguments are a JSON text, as OpenAI
// sends them.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool is a chat tool.
type Tool struct {
	Type     string   `json:"type"`
	Function Function `json:"function"`
}

// Function is a tool's function: parameters is a JSON Schema, kept as
// sent (the chat template renders it).
type Function struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// NamedToolChoice is the chat tool_choice that forces one function.
func NamedToolChoice(name string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": name}})
	return b
}

// Chunk is one chat.completion.chunk, or an in-band error event (Error
// set) of a stream that broke after its first token.
type Chunk struct {
	ID      string        `json:"id"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []Choice      `json:"choices"`
	Usage   *Usage        `json:"usage"`
	Error   *ErrorPayload `json:"error"`
}

// Choice is a chunk's choice.
type Choice struct {
	Index        int             `json:"index"`
	Delta        Delta           `json:"delta"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// Delta is what a chunk adds to a choice.
type Delta struct {
	Content          *string         `json:"content"`
	ReasoningContent *string         `json:"reasoning_content"`
	ToolCalls        []ToolCallDelta `json:"tool_calls"`
}

// ToolCallDelta is one streamed piece of a tool call: the first names the
// call (id, function.name), the later ones add argument text; index says
// which call of the message it belongs to.
type ToolCallDelta struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Usage is the usage chunk's usage, with the details translators report.
type Usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// Cached is usage.prompt_tokens_details.cached_tokens (0 when absent).
func (u *Usage) Cached() int {
	if u == nil || u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// Reasoning is usage.completion_tokens_details.reasoning_tokens (0 when
// absent).
func (u *Usage) Reasoning() int {
	if u == nil || u.CompletionTokensDetails == nil {
		return 0
	}
	return u.CompletionTokensDetails.ReasoningTokens
}

// ErrorPayload is OpenAI's error object.
type ErrorPayload struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// ErrDone is returned by ParseData for the stream's "[DONE]" terminator.
var ErrDone = errors.New("chatstream: done")

// ParseData decodes one SSE data value of a chat stream.
func ParseData(data []byte) (*Chunk, error) {
	if string(data) == "[DONE]" {
		return nil, ErrDone
	}
	var c Chunk
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("chatstream: decoding a chat chunk: %w", err)
	}
	return &c, nil
}

// ParseError decodes a chat error body ({"error":{...}}) into an
// openai.Error with the given status. A body that is not one becomes an
// internal error quoting it.
func ParseError(status int, body []byte) *openai.Error {
	var b struct {
		Error *ErrorPayload `json:"error"`
	}
	if err := json.Unmarshal(body, &b); err != nil || b.Error == nil {
		return &openai.Error{Status: status, Type: "server_error", Code: "upstream_error", Message: strings.TrimSpace(string(body))}
	}
	return b.Error.ToError(status)
}

// Status is the HTTP status an in-band error would have had, from its
// type (openai's constructors: service_unavailable 503, timeout 504,
// invalid_request_error 400; others 500).
func (p *ErrorPayload) Status() int {
	switch p.Type {
	case "service_unavailable":
		return 503
	case "timeout":
		return 504
	case "invalid_request_error":
		return 400
	}
	return 500
}

// ToError is p as an openai.Error with the given status.
func (p *ErrorPayload) ToError(status int) *openai.Error {
	e := &openai.Error{Status: status, Type: p.Type, Message: p.Message}
	if p.Param != nil {
		e.Param = *p.Param
	}
	if p.Code != nil {
		e.Code = *p.Code
	}
	return e
}
