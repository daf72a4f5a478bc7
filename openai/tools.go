package openai

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// ToolChoice is a decoded tool_choice: Mode is "auto", "none", "required"
// or "function" (then Name is the function).
type ToolChoice struct {
	Mode string
	Name string
}

// Forced says whether the request demands a call (required or a named
// function).
func (c ToolChoice) Forced() bool { return c.Mode == "required" || c.Mode == "function" }

// reasoningEfforts are OpenAI's reasoning_effort values.
var reasoningEfforts = map[string]bool{"none": true, "minimal": true, "low": true, "medium": true, "high": true, "xhigh": true}

// checkToolFields validates tool_choice, parallel_tool_calls and
// reasoning_effort as OpenAI does, and fills r.Choice: tool_choice
// defaults to "auto" with tools and "none" without; "required" and a named
// function need tools, and the named one must be among them.
func (r *ChatRequest) checkToolFields() *Error {
	if r.ReasoningEffort != nil && !reasoningEfforts[*r.ReasoningEffort] {
		return BadRequest("reasoning_effort", "invalid_value", "reasoning_effort must be one of none, minimal, low, medium, high, xhigh; got %q", *r.ReasoningEffort)
	}
	r.Choice = ToolChoice{Mode: "none"}
	if r.Tools != nil {
		r.Choice.Mode = "auto"
	}
	raw := bytes.TrimSpace(r.ToolChoice)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return BadRequest("tool_choice", "invalid_type", "tool_choice must be a string or an object")
		}
		switch s {
		case "none", "auto", "required":
			r.Choice.Mode = s
		default:
			return BadRequest("tool_choice", "invalid_value", `tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}; got %q`, s)
		}
	} else {
		var obj struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return BadRequest("tool_choice", "invalid_type", "tool_choice must be a string or an object: %v", err)
		}
		if obj.Type != "function" || obj.Function.Name == "" {
			return BadRequest("tool_choice", "invalid_value", `a tool_choice object must be {"type": "function", "function": {"name": ...}}`)
		}
		r.Choice = ToolChoice{Mode: "function", Name: obj.Function.Name}
	}
	if r.Choice.Mode == "none" || r.Choice.Mode == "auto" {
		return nil
	}
	if r.Tools == nil {
		return BadRequest("tool_choice", "invalid_value", "tool_choice %q needs tools", r.Choice.Mode)
	}
	if r.Choice.Mode == "function" {
		var tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		_ = json.Unmarshal(r.Tools, &tools) // checked by checkTools
		for _, t := range tools {
			if t.Function.Name == r.Choice.Name {
				return nil
			}
		}
		return BadRequest("tool_choice", "invalid_value", "tool_choice names function %q, which is not in tools", r.Choice.Name)
	}
	return nil
}

// ToolCall is a call in a response message.
type ToolCall struct {
	ID       string           `json:"id"`
	Type     string           `json:"type"`
	Function ToolCallFunction `json:"function"`
}

// ToolCallFunction is a call's function and its JSON arguments as text.
type ToolCallFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// CompletionTokensDetails is usage.completion_tokens_details.
type CompletionTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// MarshalJSON writes content as null when the message is only tool calls,
// as OpenAI does, and leaves out reasoning_content and tool_calls when
// there are none.
func (m AssistantMessage) MarshalJSON() ([]byte, error) {
	type wire struct {
		Role             string     `json:"role"`
		Content          *string    `json:"content"`
		ReasoningContent *string    `json:"reasoning_content,omitempty"`
		ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	}
	w := wire{Role: m.Role, ToolCalls: m.ToolCalls}
	if m.Content != "" || len(m.ToolCalls) == 0 {
		w.Content = &m.Content
	}
	if m.ReasoningContent != "" {
		w.ReasoningContent = &m.ReasoningContent
	}
	return json.Marshal(w)
}

// CallDelta is one tool_calls entry of a streamed delta: a call's first
// carries ID and Name, later ones only Arguments.
type CallDelta struct {
	Index     int
	ID, Name  string
	Arguments string
}

// AppendDeltaChunk appends a chat chunk whose delta may carry
// reasoning_content, content and tool_calls, shaped as OpenAI streams them
// (a call's first entry: index, id, type "function", function name and
// arguments ""; later ones: index and function.arguments).
func (h *ChunkHeader) AppendDeltaChunk(dst []byte, reasoning, content string, calls []CallDelta, finish string) []byte {
	dst = h.appendPrefix(dst)
	dst = append(dst, `,"choices":[{"index":0,"delta":{`...)
	sep := false
	comma := func() {
		if sep {
			dst = append(dst, ',')
		}
		sep = true
	}
	if reasoning != "" {
		comma()
		dst = append(dst, `"reasoning_content":`...)
		dst = AppendString(dst, reasoning)
	}
	if content != "" {
		comma()
		dst = append(dst, `"content":`...)
		dst = AppendString(dst, content)
	}
	if len(calls) > 0 {
		comma()
		dst = append(dst, `"tool_calls":[`...)
		for i, c := range calls {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"index":`...)
			dst = strconv.AppendInt(dst, int64(c.Index), 10)
			if c.ID != "" {
				dst = append(dst, `,"id":`...)
				dst = AppendString(dst, c.ID)
				dst = append(dst, `,"type":"function","function":{"name":`...)
				dst = AppendString(dst, c.Name)
				dst = append(dst, `,"arguments":`...)
			} else {
				dst = append(dst, `,"function":{"arguments":`...)
			}
			dst = AppendString(dst, c.Arguments)
			dst = append(dst, "}}"...)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `},"logprobs":null,"finish_reason":`...)
	if finish == "" {
		dst = append(dst, "null"...)
	} else {
		dst = AppendString(dst, finish)
	}
	return append(dst, "}]}\n\n"...)
}
