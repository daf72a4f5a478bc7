// Package responses is OpenAI's Responses API (POST /v1/responses) as a
// translator over chat completions: Decode reads and checks a request,
// ToChat turns it into the chat request the pipeline runs, Translator
// turns the chat stream back into Responses events (or one Response
// object), and Store keeps finished conversations for
// previous_response_id. Wire shapes follow OpenAI's API reference
// (https://platform.openai.com/docs/api-reference/responses) and the
// openai-python / openai-node type definitions.
package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/tandemllm/tandem/openai"
	"github.com/tandemllm/tandem/openai/chatstream"
)

// Request is a POST /v1/responses body.
type Request struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	PreviousResponseID string            `json:"previous_response_id"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	Text               *TextConfig       `json:"text"`
	Reasoning          *Reasoning        `json:"reasoning"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	TopLogprobs        *int              `json:"top_logprobs"`
	Stream             bool              `json:"stream"`
	Store              *bool             `json:"store"`
	User               string            `json:"user"`
	Metadata           map[string]string `json:"metadata"`
	Include            []string          `json:"include"`
	Truncation         string            `json:"truncation"`
	ServiceTier        string            `json:"service_tier"`
	Background         bool              `json:"background"`
	MaxToolCalls       *int              `json:"max_tool_calls"`
	Conversation       json.RawMessage   `json:"conversation"`
	Prompt             json.RawMessage   `json:"prompt"`
	// vLLM's extensions, passed to chat as they are.
	TopK               *int                       `json:"top_k"`
	Seed               *int64                     `json:"seed"`
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
}

// TextConfig is the text object: the output format.
type TextConfig struct {
	Format    json.RawMessage `json:"format"`
	Verbosity string          `json:"verbosity"`
}

// Reasoning is the reasoning object.
type Reasoning struct {
	Effort  string `json:"effort"`
	Summary string `json:"summary"`
}

// Limits of one request.
const (
	MaxInputItems = 4096
	MaxTools      = 512
)

func bad(param, code, format string, args ...any) *openai.Error {
	return openai.BadRequest(param, code, format, args...)
}

// Decode parses and checks a request body. Fields Tandem cannot honour
// are refused naming the field; docs/api.md lists each.
func Decode(body []byte) (*Request, *openai.Error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, bad("", "invalid_json", "request body is empty")
	}
	var r Request
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&r); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			return nil, bad(te.Field, "invalid_type", "field %q: expected %s, got JSON %s", te.Field, te.Type, te.Value)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, bad("", "invalid_json", "malformed JSON: unexpected end of input")
		default:
			return nil, bad("", "invalid_json", "malformed JSON: %v", err)
		}
	}
	if dec.More() {
		return nil, bad("", "invalid_json", "trailing data after the JSON object")
	}
	if r.Model == "" {
		return nil, bad("model", "missing_field", "model is required")
	}
	if r.Background {
		return nil, bad("background", "unsupported_value", "background responses are not supported; send the request without background")
	}
	if len(r.Conversation) > 0 && !bytes.Equal(r.Conversation, []byte("null")) {
		return nil, bad("conversation", "unsupported_value", "conversations are not supported; use previous_response_id")
	}
	if len(r.Prompt) > 0 && !bytes.Equal(r.Prompt, []byte("null")) {
		return nil, bad("prompt", "unsupported_value", "prompt templates are not supported; send input and instructions")
	}
	if r.MaxOutputTokens != nil && *r.MaxOutputTokens < 1 {
		return nil, bad("max_output_tokens", "invalid_value", "max_output_tokens must be at least 1, got %d", *r.MaxOutputTokens)
	}
	if r.MaxToolCalls != nil && *r.MaxToolCalls < 1 {
		return nil, bad("max_tool_calls", "invalid_value", "max_tool_calls must be at least 1, got %d", *r.MaxToolCalls)
	}
	if r.Truncation != "" && r.Truncation != "disabled" && r.Truncation != "auto" {
		return nil, bad("truncation", "invalid_value", "truncation must be \"auto\" or \"disabled\", got %q", r.Truncation)
	}
	if r.Truncation == "auto" {
		return nil, bad("truncation", "unsupported_value", "truncation \"auto\" is not supported: a too-long conversation is a 400, never cut")
	}
	if len(r.Tools) > MaxTools {
		return nil, bad("tools", "invalid_value", "at most %d tools are allowed, got %d", MaxTools, len(r.Tools))
	}
	for _, inc := range r.Include {
		if inc != "message.output_text.logprobs" && inc != "reasoning.encrypted_content" {
			return nil, bad("include", "unsupported_value", "include %q is not supported", inc)
		}
	}
	if len(bytes.TrimSpace(r.Input)) == 0 || bytes.Equal(bytes.TrimSpace(r.Input), []byte("null")) {
		return nil, bad("input", "missing_field", "input is required")
	}
	return &r, nil
}

// Item is one input or output item: a message, a function call, a
// function call's output, or a reasoning item.
type Item struct {
	Type      string          `json:"type"`
	ID        string          `json:"id,omitempty"`
	Role      string          `json:"role,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	CallID    string          `json:"call_id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments string          `json:"arguments,omitempty"`
	Output    json.RawMessage `json:"output,omitempty"`
	Summary   json.RawMessage `json:"summary,omitempty"`
}

// contentPart is one part of an input message's content.
type contentPart struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

// messageText joins a message's content (a string, or input_text /
// output_text parts) into one string; other parts are refused naming them.
func messageText(raw json.RawMessage, param string) (string, *openai.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", bad(param, "missing_field", "content is required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", bad(param, "invalid_type", "content: %v", err)
		}
		return s, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", bad(param, "invalid_type", "content must be a string or an array of content parts")
	}
	var sb strings.Builder
	for i, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
		case "input_image", "input_file", "input_audio":
			return "", bad(fmt.Sprintf("%s[%d].type", param, i), "unsupported_value", "content type %q is not supported: Tandem serves text models", p.Type)
		default:
			return "", bad(fmt.Sprintf("%s[%d].type", param, i), "unsupported_value", "content type %q is not supported", p.Type)
		}
		if p.Text == nil {
			return "", bad(fmt.Sprintf("%s[%d].text", param, i), "missing_field", "a text part needs text")
		}
		if i > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(*p.Text)
	}
	return sb.String(), nil
}

// Items converts input (a string or a list of items) into chat messages,
// appended to msgs.
func Items(input json.RawMessage, msgs []chatstream.Message) ([]chatstream.Message, *openai.Error) {
	input = bytes.TrimSpace(input)
	if input[0] == '"' {
		var s string
		if err := json.Unmarshal(input, &s); err != nil {
			return nil, bad("input", "invalid_type", "input: %v", err)
		}
		return append(msgs, chatstream.Message{Role: "user", Content: chatstream.Text(s)}), nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(input, &items); err != nil {
		return nil, bad("input", "invalid_type", "input must be a string or an array of items")
	}
	if len(items) == 0 {
		return nil, bad("input", "invalid_value", "input must not be empty")
	}
	if len(items) > MaxInputItems {
		return nil, bad("input", "invalid_value", "at most %d input items are allowed, got %d", MaxInputItems, len(items))
	}
	for i, raw := range items {
		param := fmt.Sprintf("input[%d]", i)
		var it Item
		if err := json.Unmarshal(raw, &it); err != nil {
			return nil, bad(param, "invalid_type", "each input item must be an object: %v", err)
		}
		switch it.Type {
		case "", "message":
			text, e := messageText(it.Content, param+".content")
			if e != nil {
				return nil, e
			}
			switch it.Role {
			case "user", "system", "developer":
				msgs = append(msgs, chatstream.Message{Role: it.Role, Content: chatstream.Text(text)})
			case "assistant":
				msgs = appendAssistant(msgs, func(m *chatstream.Message) { m.Content = joinContent(m.Content, text) })
			default:
				return nil, bad(param+".role", "invalid_value", "unknown role %q", it.Role)
			}
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return nil, bad(param, "missing_field", "a function_call item needs call_id and name")
			}
			args := it.Arguments
			if args == "" {
				args = "{}"
			}
			msgs = appendAssistant(msgs, func(m *chatstream.Message) {
				m.ToolCalls = append(m.ToolCalls, chatstream.ToolCall{ID: it.CallID, Type: "function",
					Function: chatstream.FunctionCall{Name: it.Name, Arguments: args}})
			})
		case "function_call_output":
			if it.CallID == "" {
				return nil, bad(param+".call_id", "missing_field", "a function_call_output item needs call_id")
			}
			out, e := outputText(it.Output, param+".output")
			if e != nil {
				return nil, e
			}
			msgs = append(msgs, chatstream.Message{Role: "tool", ToolCallID: it.CallID, Content: chatstream.Text(out)})
		case "reasoning":
			// A reasoning item sent back is the model's own earlier
			// thought: chat templates drop past reasoning, so it is
			// kept only on the assistant turn it belongs to.
			var r struct {
				Content []contentPart `json:"content"`
			}
			_ = json.Unmarshal(raw, &r)
			var sb strings.Builder
			for _, p := range r.Content {
				if p.Text != nil {
					sb.WriteString(*p.Text)
				}
			}
			if sb.Len() > 0 {
				msgs = appendAssistant(msgs, func(m *chatstream.Message) { m.ReasoningContent += sb.String() })
			}
		case "item_reference":
			return nil, bad(param+".type", "unsupported_value", "item_reference is not supported; send the item itself or use previous_response_id")
		default:
			return nil, bad(param+".type", "unsupported_value", "input item type %q is not supported", it.Type)
		}
	}
	return msgs, nil
}

// appendAssistant applies f to the trailing assistant message, or to a new
// one: output items of one turn (reasoning, text, function calls) form one
// chat message.
func appendAssistant(msgs []chatstream.Message, f func(*chatstream.Message)) []chatstream.Message {
	if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
		f(&msgs[n-1])
		return msgs
	}
	msgs = append(msgs, chatstream.Message{Role: "assistant", Content: json.RawMessage("null")})
	f(&msgs[len(msgs)-1])
	return msgs
}

func joinContent(prev json.RawMessage, text string) json.RawMessage {
	var s string
	if len(prev) > 0 && prev[0] == '"' {
		_ = json.Unmarshal(prev, &s)
	}
	return chatstream.Text(s + text)
}

// outputText is a function_call_output's output: a string, or text parts.
func outputText(raw json.RawMessage, param string) (string, *openai.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", bad(param, "missing_field", "output is required")
	}
	return messageText(raw, param)
}

// ToChat builds the chat request for r after history (the stored
// conversation of previous_response_id, nil for none). It returns the
// request and the conversation it holds (history plus this input, without
// instructions, which do not carry over to the next response).
func ToChat(r *Request, history []chatstream.Message) (*chatstream.Request, []chatstream.Message, *openai.Error) {
	conv, e := Items(r.Input, append([]chatstream.Message(nil), history...))
	if e != nil {
		return nil, nil, e
	}
	msgs := conv
	if r.Instructions != nil && *r.Instructions != "" {
		msgs = append([]chatstream.Message{{Role: "system", Content: chatstream.Text(*r.Instructions)}}, conv...)
	}
	c := &chatstream.Request{
		Model: r.Model, Messages: msgs, ParallelToolCalls: r.ParallelToolCalls,
		MaxCompletionTokens: r.MaxOutputTokens, Temperature: r.Temperature, TopP: r.TopP,
		TopK: r.TopK, Seed: r.Seed, User: r.User, ChatTemplateKwargs: r.ChatTemplateKwargs,
		Stream: true, StreamOptions: &openai.StreamOptions{IncludeUsage: true},
	}
	for i, raw := range r.Tools {
		param := fmt.Sprintf("tools[%d]", i)
		var t struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      *bool           `json:"strict"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, nil, bad(param, "invalid_type", "each tool must be an object: %v", err)
		}
		if t.Type != "function" {
			return nil, nil, bad(param+".type", "unsupported_value", "tool type %q is not supported; only function tools are", t.Type)
		}
		if t.Name == "" {
			return nil, nil, bad(param+".name", "missing_field", "a function tool needs a name")
		}
		c.Tools = append(c.Tools, chatstream.Tool{Type: "function", Function: chatstream.Function{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Strict: t.Strict}})
	}
	if tc := bytes.TrimSpace(r.ToolChoice); len(tc) > 0 && !bytes.Equal(tc, []byte("null")) {
		if tc[0] == '"' {
			var s string
			_ = json.Unmarshal(tc, &s)
			if s != "auto" && s != "none" && s != "required" {
				return nil, nil, bad("tool_choice", "invalid_value", "tool_choice must be \"auto\", \"none\", \"required\" or a function, got %q", s)
			}
			c.ToolChoice = tc
		} else {
			var f struct {
				Type string `json:"type"`
				Name string `json:"name"`
			}
			if err := json.Unmarshal(tc, &f); err != nil || f.Type != "function" || f.Name == "" {
				return nil, nil, bad("tool_choice", "unsupported_value", "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\":\"function\",\"name\":...}")
			}
			c.ToolChoice = chatstream.NamedToolChoice(f.Name)
		}
	}
	if r.Text != nil && len(bytes.TrimSpace(r.Text.Format)) > 0 && !bytes.Equal(bytes.TrimSpace(r.Text.Format), []byte("null")) {
		rf, e := responseFormat(r.Text.Format)
		if e != nil {
			return nil, nil, e
		}
		c.ResponseFormat = rf
	}
	if r.Reasoning != nil && r.Reasoning.Effort != "" {
		c.ReasoningEffort = r.Reasoning.Effort
	}
	if r.TopLogprobs != nil {
		if *r.TopLogprobs < 0 || *r.TopLogprobs > 20 {
			return nil, nil, bad("top_logprobs", "invalid_value", "top_logprobs must be between 0 and 20, got %d", *r.TopLogprobs)
		}
		c.Logprobs, c.TopLogprobs = true, r.TopLogprobs
	}
	for _, inc := range r.Include {
		if inc == "message.output_text.logprobs" {
			c.Logprobs = true
		}
	}
	return c, conv, nil
}

// responseFormat maps text.format to chat's response_format: text and
// json_object as they are; json_schema's flat {name, schema, strict,
// description} into chat's {"json_schema": {...}}.
func responseFormat(raw json.RawMessage) (json.RawMessage, *openai.Error) {
	var f struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict,omitempty"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, bad("text.format", "invalid_type", "text.format must be an object: %v", err)
	}
	switch f.Type {
	case "text", "json_object":
		b, _ := json.Marshal(map[string]string{"type": f.Type})
		return b, nil
	case "json_schema":
		if f.Name == "" {
			return nil, bad("text.format.name", "missing_field", "a json_schema format needs a name")
		}
		if len(f.Schema) == 0 {
			return nil, bad("text.format.schema", "missing_field", "a json_schema format needs a schema")
		}
		js := map[string]any{"name": f.Name, "schema": f.Schema}
		if f.Description != "" {
			js["description"] = f.Description
		}
		if f.Strict != nil {
			js["strict"] = *f.Strict
		}
		b, err := json.Marshal(map[string]any{"type": "json_schema", "json_schema": js})
		if err != nil {
			return nil, bad("text.format.schema", "invalid_value", "%v", err)
		}
		return b, nil
	}
	return nil, bad("text.format.type", "invalid_value", "text.format.type must be text, json_object or json_schema, got %q", f.Type)
}

// ChatParam maps a parameter named in a chat error to the Responses
// field the client sent.
func ChatParam(p string) string {
	switch {
	case p == "max_completion_tokens" || p == "max_tokens":
		return "max_output_tokens"
	case p == "response_format" || strings.HasPrefix(p, "response_format."):
		return "text.format" + strings.TrimPrefix(strings.TrimPrefix(p, "response_format"), ".json_schema")
	case strings.HasPrefix(p, "messages"):
		return "input"
	case p == "reasoning_effort":
		return "reasoning.effort"
	}
	return p
}
