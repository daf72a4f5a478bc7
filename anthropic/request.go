// Package anthropic is Anthropic's Messages API (POST /v1/messages) as a
// translator over chat completions: Decode reads and checks a request,
// ToChat turns it into the chat request the pipeline runs, and Translator
// turns the chat stream back into Messages streaming events (or one
// Message). Shapes follow Anthropic's API reference
// (https://docs.anthropic.com/en/api/messages,
// https://docs.anthropic.com/en/docs/build-with-claude/streaming) and the
// anthropic-sdk-typescript type definitions.
package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/tandemllm/tandem/openai"
	"github.com/tandemllm/tandem/openai/chatstream"
)

// Request is a POST /v1/messages body.
type Request struct {
	Model         string            `json:"model"`
	MaxTokens     *int              `json:"max_tokens"`
	Messages      []InputMessage    `json:"messages"`
	System        json.RawMessage   `json:"system"`
	StopSequences []string          `json:"stop_sequences"`
	Stream        bool              `json:"stream"`
	Temperature   *float64          `json:"temperature"`
	TopP          *float64          `json:"top_p"`
	TopK          *int              `json:"top_k"`
	Tools         []json.RawMessage `json:"tools"`
	ToolChoice    json.RawMessage   `json:"tool_choice"`
	Thinking      *Thinking         `json:"thinking"`
	Metadata      *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
	ServiceTier string          `json:"service_tier"`
	MCPServers  json.RawMessage `json:"mcp_servers"`
	Container   json.RawMessage `json:"container"`
}

// InputMessage is one input message.
type InputMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// Thinking is the extended thinking configuration.
type Thinking struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budget_tokens"`
}

// Block is a content block, in requests and responses.
type Block struct {
	Type string `json:"type"`
	// text
	Text *string `json:"text,omitempty"`
	// tool_use
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// tool_result
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	// thinking
	Thinking  *string `json:"thinking,omitempty"`
	Signature *string `json:"signature,omitempty"`
}

// Limits of one request.
const (
	MaxMessages      = 4096
	MaxTools         = 512
	MaxStopSequences = openai.MaxStopSequences
)

// Error is an Anthropic API error; its JSON form is
// {"type":"error","error":{"type","message"}}. Anthropic's errors carry no
// param field, so a refusal names the field at the start of its message.
type Error struct {
	Status  int
	Type    string
	Message string
}

func (e *Error) Error() string { return e.Type + ": " + e.Message }

func bad(param, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if param != "" {
		msg = param + ": " + msg
	}
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: msg}
}

// FromOpenAI words an OpenAI-shaped error (the chat pipeline's, or the
// frontend's) in Anthropic's types, by status as Anthropic's API maps
// them (https://docs.anthropic.com/en/api/errors). param, when the error
// names one, leads the message.
func FromOpenAI(e *openai.Error, param string) *Error {
	t := "api_error"
	switch e.Status {
	case http.StatusBadRequest, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity:
		t = "invalid_request_error"
	case http.StatusUnauthorized:
		t = "authentication_error"
	case http.StatusForbidden:
		t = "permission_error"
	case http.StatusNotFound:
		t = "not_found_error"
	case http.StatusRequestEntityTooLarge:
		t = "request_too_large"
	case http.StatusTooManyRequests:
		t = "rate_limit_error"
	case http.StatusServiceUnavailable:
		t = "overloaded_error"
	case http.StatusGatewayTimeout:
		t = "timeout_error"
	}
	msg := e.Message
	if param != "" {
		msg = param + ": " + msg
	}
	return &Error{Status: e.Status, Type: t, Message: msg}
}

// JSON is the error body.
func (e *Error) JSON() []byte {
	b, _ := json.Marshal(struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}{Type: "error", Error: struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}{e.Type, e.Message}})
	return b
}

// Write writes e as a whole response.
func (e *Error) Write(w http.ResponseWriter, retryAfter int) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if retryAfter > 0 {
		h.Set("Retry-After", fmt.Sprint(retryAfter))
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.JSON())
}

// Decode parses and checks a request body.
func Decode(body []byte) (*Request, *Error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, bad("", "request body is empty")
	}
	var r Request
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&r); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			return nil, bad(te.Field, "expected %s, got JSON %s", te.Type, te.Value)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, bad("", "malformed JSON: unexpected end of input")
		default:
			return nil, bad("", "malformed JSON: %v", err)
		}
	}
	if dec.More() {
		return nil, bad("", "trailing data after the JSON object")
	}
	switch {
	case r.Model == "":
		return nil, bad("model", "Field required")
	case r.MaxTokens == nil:
		return nil, bad("max_tokens", "Field required")
	case *r.MaxTokens < 1:
		return nil, bad("max_tokens", "must be at least 1, got %d", *r.MaxTokens)
	case len(r.Messages) == 0:
		return nil, bad("messages", "at least one message is required")
	case len(r.Messages) > MaxMessages:
		return nil, bad("messages", "at most %d messages are allowed, got %d", MaxMessages, len(r.Messages))
	case len(r.Tools) > MaxTools:
		return nil, bad("tools", "at most %d tools are allowed, got %d", MaxTools, len(r.Tools))
	case len(r.StopSequences) > MaxStopSequences:
		return nil, bad("stop_sequences", "at most %d stop sequences are allowed, got %d", MaxStopSequences, len(r.StopSequences))
	case r.Temperature != nil && (*r.Temperature < 0 || *r.Temperature > 1):
		return nil, bad("temperature", "must be between 0 and 1, got %v", *r.Temperature)
	case r.TopP != nil && (*r.TopP <= 0 || *r.TopP > 1):
		return nil, bad("top_p", "must be in (0, 1], got %v", *r.TopP)
	case r.TopK != nil && *r.TopK < 0:
		return nil, bad("top_k", "must not be negative, got %d", *r.TopK)
	case len(r.MCPServers) > 0 && string(r.MCPServers) != "null":
		return nil, bad("mcp_servers", "MCP servers are not supported")
	case len(r.Container) > 0 && string(r.Container) != "null":
		return nil, bad("container", "containers are not supported")
	}
	if r.Thinking != nil {
		switch r.Thinking.Type {
		case "enabled", "disabled":
		default:
			return nil, bad("thinking.type", "must be \"enabled\" or \"disabled\", got %q", r.Thinking.Type)
		}
		if r.Thinking.Type == "enabled" && r.Thinking.BudgetTokens >= *r.MaxTokens {
			return nil, bad("thinking.budget_tokens", "must be less than max_tokens (%d), got %d", *r.MaxTokens, r.Thinking.BudgetTokens)
		}
	}
	for i, s := range r.StopSequences {
		if s == "" || len(s) > openai.MaxStopLength {
			return nil, bad(fmt.Sprintf("stop_sequences[%d]", i), "stop sequences must be 1 to %d bytes long", openai.MaxStopLength)
		}
	}
	return &r, nil
}

// blocks reads a content value: a string is one text block.
func blocks(raw json.RawMessage, param string) ([]Block, *Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, bad(param, "Field required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, bad(param, "%v", err)
		}
		return []Block{{Type: "text", Text: &s}}, nil
	}
	var bs []Block
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, bad(param, "must be a string or an array of content blocks: %v", err)
	}
	return bs, nil
}

// textOf joins text blocks (a tool_result's content, the system prompt).
func textOf(raw json.RawMessage, param string) (string, *Error) {
	bs, e := blocks(raw, param)
	if e != nil {
		return "", e
	}
	var sb strings.Builder
	for i, b := range bs {
		if b.Type != "text" || b.Text == nil {
			return "", bad(fmt.Sprintf("%s[%d].type", param, i), "content type %q is not supported here; only text is", b.Type)
		}
		if i > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(*b.Text)
	}
	return sb.String(), nil
}

// ToChat builds the chat request for r. stop_sequences stay out of it:
// the Translator matches them itself, because Anthropic reports which one
// ended the message (stop_sequence) and a chat stream does not.
func ToChat(r *Request) (*chatstream.Request, *Error) {
	c := &chatstream.Request{
		Model: r.Model, MaxCompletionTokens: r.MaxTokens, Temperature: r.Temperature, TopP: r.TopP,
		Stream:        true,
		StreamOptions: &openai.StreamOptions{IncludeUsage: true, ContinuousUsageStats: true},
	}
	if r.TopK != nil && *r.TopK > 0 {
		c.TopK = r.TopK
	}
	if r.Metadata != nil {
		c.User = r.Metadata.UserID
	}
	if s := bytes.TrimSpace(r.System); len(s) > 0 && !bytes.Equal(s, []byte("null")) {
		text, e := textOf(s, "system")
		if e != nil {
			return nil, e
		}
		c.Messages = append(c.Messages, chatstream.Message{Role: "system", Content: chatstream.Text(text)})
	}
	for i, m := range r.Messages {
		param := fmt.Sprintf("messages[%d]", i)
		if m.Role != "user" && m.Role != "assistant" {
			return nil, bad(param+".role", "must be \"user\" or \"assistant\", got %q", m.Role)
		}
		bs, e := blocks(m.Content, param+".content")
		if e != nil {
			return nil, e
		}
		msgs, e := convertMessage(m.Role, bs, param+".content")
		if e != nil {
			return nil, e
		}
		c.Messages = append(c.Messages, msgs...)
	}
	for i, raw := range r.Tools {
		param := fmt.Sprintf("tools[%d]", i)
		var t struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, bad(param, "each tool must be an object: %v", err)
		}
		if t.Type != "" && t.Type != "custom" {
			return nil, bad(param+".type", "tool type %q is not supported; only custom (client) tools are", t.Type)
		}
		if t.Name == "" {
			return nil, bad(param+".name", "Field required")
		}
		if len(t.InputSchema) == 0 {
			return nil, bad(param+".input_schema", "Field required")
		}
		c.Tools = append(c.Tools, chatstream.Tool{Type: "function", Function: chatstream.Function{Name: t.Name, Description: t.Description, Parameters: t.InputSchema}})
	}
	if tc := bytes.TrimSpace(r.ToolChoice); len(tc) > 0 && !bytes.Equal(tc, []byte("null")) {
		var ch struct {
			Type                   string `json:"type"`
			Name                   string `json:"name"`
			DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
		}
		if err := json.Unmarshal(tc, &ch); err != nil {
			return nil, bad("tool_choice", "must be an object: %v", err)
		}
		switch ch.Type {
		case "auto":
			c.ToolChoice = json.RawMessage(`"auto"`)
		case "any":
			c.ToolChoice = json.RawMessage(`"required"`)
		case "none":
			c.ToolChoice = json.RawMessage(`"none"`)
		case "tool":
			if ch.Name == "" {
				return nil, bad("tool_choice.name", "Field required")
			}
			c.ToolChoice = chatstream.NamedToolChoice(ch.Name)
		default:
			return nil, bad("tool_choice.type", "must be auto, any, tool or none, got %q", ch.Type)
		}
		if ch.DisableParallelToolUse {
			f := false
			c.ParallelToolCalls = &f
		}
	}
	if r.Thinking != nil {
		// Chat templates of reasoning models switch thinking with
		// enable_thinking (Qwen3's, as vLLM's chat_template_kwargs pass it).
		on := json.RawMessage("false")
		if r.Thinking.Type == "enabled" {
			on = json.RawMessage("true")
		}
		c.ChatTemplateKwargs = map[string]json.RawMessage{"enable_thinking": on}
	}
	return c, nil
}

// convertMessage turns one Messages turn into chat messages: a user turn's
// tool_result blocks become tool messages (first, in order, as chat
// expects them right after the assistant's calls), its text one user
// message; an assistant turn's thinking, text and tool_use blocks one
// assistant message.
func convertMessage(role string, bs []Block, param string) ([]chatstream.Message, *Error) {
	var out []chatstream.Message
	var text strings.Builder
	hasText := false
	asst := chatstream.Message{Role: "assistant", Content: json.RawMessage("null")}
	for i, b := range bs {
		p := fmt.Sprintf("%s[%d]", param, i)
		switch b.Type {
		case "text":
			if b.Text == nil {
				return nil, bad(p+".text", "Field required")
			}
			if hasText {
				text.WriteByte('\n')
			}
			text.WriteString(*b.Text)
			hasText = true
		case "image", "document":
			return nil, bad(p+".type", "content type %q is not supported: Tandem serves text models", b.Type)
		case "tool_use":
			if role != "assistant" {
				return nil, bad(p+".type", "tool_use blocks belong to assistant messages")
			}
			if b.ID == "" || b.Name == "" {
				return nil, bad(p, "a tool_use block needs id and name")
			}
			args := string(bytes.TrimSpace(b.Input))
			if args == "" || args == "null" {
				args = "{}"
			}
			asst.ToolCalls = append(asst.ToolCalls, chatstream.ToolCall{ID: b.ID, Type: "function", Function: chatstream.FunctionCall{Name: b.Name, Arguments: args}})
		case "tool_result":
			if role != "user" {
				return nil, bad(p+".type", "tool_result blocks belong to user messages")
			}
			if b.ToolUseID == "" {
				return nil, bad(p+".tool_use_id", "Field required")
			}
			content := ""
			if c := bytes.TrimSpace(b.Content); len(c) > 0 && !bytes.Equal(c, []byte("null")) {
				var e *Error
				if content, e = textOf(c, p+".content"); e != nil {
					return nil, e
				}
			}
			if b.IsError {
				content = "Error: " + content
			}
			out = append(out, chatstream.Message{Role: "tool", ToolCallID: b.ToolUseID, Content: chatstream.Text(content)})
		case "thinking":
			if role == "assistant" && b.Thinking != nil {
				asst.ReasoningContent += *b.Thinking
			}
		case "redacted_thinking":
			// Encrypted by Anthropic for Anthropic's models: nothing a
			// template could render.
		default:
			return nil, bad(p+".type", "content type %q is not supported", b.Type)
		}
	}
	if role == "assistant" {
		if hasText || len(asst.ToolCalls) == 0 {
			asst.Content = chatstream.Text(text.String())
		}
		return append(out, asst), nil
	}
	if hasText || len(out) == 0 {
		out = append(out, chatstream.Message{Role: "user", Content: chatstream.Text(text.String())})
	}
	return out, nil
}

// ChatParam maps a parameter named in a chat error to the Messages field
// the client sent.
func ChatParam(p string) string {
	switch {
	case p == "max_completion_tokens" || p == "max_tokens":
		return "max_tokens"
	case p == "stop":
		return "stop_sequences"
	case strings.HasPrefix(p, "messages"):
		return "messages"
	}
	return p
}
