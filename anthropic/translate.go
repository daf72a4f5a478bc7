package anthropic

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/tandemllm/tandem/openai"
	"github.com/tandemllm/tandem/openai/chatstream"
)

// Message is the response object.
type Message struct {
	ID           string  `json:"id"`
	Type         string  `json:"type"`
	Role         string  `json:"role"`
	Model        string  `json:"model"`
	Content      []Block `json:"content"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        Usage   `json:"usage"`
}

// Usage is Anthropic's usage: input_tokens are the prompt tokens not read
// from the cache, cache_read_input_tokens those that were (Anthropic's
// total input is their sum).
type Usage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// StopReason maps a chat finish_reason to Anthropic's stop_reason.
func StopReason(finish string) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls":
		return "tool_use"
	case "content_filter":
		return "refusal"
	}
	return "end_turn"
}

// Translator turns one chat stream into Messages events and the final
// Message. It is not safe for concurrent use.
type Translator struct {
	Msg     *Message
	started bool
	open    int         // index of the open content block, -1 for none
	calls   map[int]int // chat tool-call index → content block index
	finish  string
	usage   *chatstream.Usage
	stop    stopMatcher
	// Stopped is set when a stop sequence ended the message: the caller
	// stops the chat stream and ends the message.
	Stopped bool
}

// NewTranslator returns a translator filling a message with id and model
// that ends its text at the first of stops.
func NewTranslator(id, model string, stops []string) *Translator {
	return &Translator{Msg: &Message{ID: id, Type: "message", Role: "assistant", Model: model, Content: []Block{}}, open: -1, calls: map[int]int{},
		stop: stopMatcher{stops: stops}}
}

// stopMatcher finds stop sequences in streamed text, holding back a tail
// that may be the start of one.
type stopMatcher struct {
	stops   []string
	pending string
}

// push adds text; it returns the text that is safe to emit, and the stop
// sequence matched ("" for none; the text after it is dropped).
func (m *stopMatcher) push(s string) (string, string) {
	if len(m.stops) == 0 {
		return s, ""
	}
	buf := m.pending + s
	at, which := -1, ""
	for _, st := range m.stops {
		if i := strings.Index(buf, st); i >= 0 && (at < 0 || i < at) {
			at, which = i, st
		}
	}
	if at >= 0 {
		m.pending = ""
		return buf[:at], which
	}
	hold := 0
	for _, st := range m.stops {
		for k := min(len(st)-1, len(buf)); k > hold; k-- {
			if strings.HasSuffix(buf, st[:k]) {
				hold = k
				break
			}
		}
	}
	m.pending = buf[len(buf)-hold:]
	return buf[:len(buf)-hold], ""
}

// flush returns the held text.
func (m *stopMatcher) flush() string {
	s := m.pending
	m.pending = ""
	return s
}

// text appends a text delta.
func (t *Translator) text(dst []byte, s string) []byte {
	if s == "" {
		return dst
	}
	var i int
	dst, i = t.openBlock(dst, "text", 0, nil)
	*t.Msg.Content[i].Text += s
	return delta(dst, i, map[string]string{"type": "text_delta", "text": s})
}

func event(dst []byte, typ string, body any) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: "...)
	b, _ := json.Marshal(body) // the package's own types
	dst = append(dst, b...)
	return append(dst, "\n\n"...)
}

// Started says whether message_start was written.
func (t *Translator) Started() bool { return t.started }

func (t *Translator) usageNow() Usage {
	u := t.usage
	if u == nil {
		return Usage{}
	}
	c := u.Cached()
	return Usage{InputTokens: u.PromptTokens - c, OutputTokens: u.CompletionTokens, CacheReadInputTokens: c}
}

// start appends message_start and a ping, once.
func (t *Translator) start(dst []byte) []byte {
	if t.started {
		return dst
	}
	t.started = true
	m := *t.Msg
	m.Content = []Block{}
	m.Usage = t.usageNow()
	dst = event(dst, "message_start", map[string]any{"type": "message_start", "message": m})
	return event(dst, "ping", map[string]string{"type": "ping"})
}

func (t *Translator) closeOpen(dst []byte) []byte {
	if t.open < 0 {
		return dst
	}
	i := t.open
	t.open = -1
	return event(dst, "content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
}

// openBlock returns the index of the open block of type typ, opening a
// new one (and closing the open one) when needed.
func (t *Translator) openBlock(dst []byte, typ string, callIdx int, call *chatstream.ToolCallDelta) ([]byte, int) {
	if typ == "tool_use" {
		if i, ok := t.calls[callIdx]; ok {
			return dst, i
		}
	} else if t.open >= 0 && t.Msg.Content[t.open].Type == typ {
		return dst, t.open
	}
	dst = t.closeOpen(dst)
	b := Block{Type: typ}
	var start any
	switch typ {
	case "text":
		s := ""
		b.Text = &s
		start = map[string]string{"type": "text", "text": ""}
	case "thinking":
		s, sig := "", ""
		b.Thinking, b.Signature = &s, &sig
		start = map[string]string{"type": "thinking", "thinking": "", "signature": ""}
	case "tool_use":
		b.ID, b.Name = call.ID, call.Function.Name
		if b.ID == "" {
			b.ID = "toolu_" + strconv.Itoa(len(t.Msg.Content))
		}
		start = map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}
	}
	t.Msg.Content = append(t.Msg.Content, b)
	t.open = len(t.Msg.Content) - 1
	if typ == "tool_use" {
		t.calls[callIdx] = t.open
	}
	return event(dst, "content_block_start", map[string]any{"type": "content_block_start", "index": t.open, "content_block": start}), t.open
}

func delta(dst []byte, i int, d any) []byte {
	return event(dst, "content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d})
}

// Chunk appends the events of one chat chunk (none once Stopped). message_start waits for the
// first chunk that carries usage (the chat stream's continuous usage), so
// that it reports the input tokens as Anthropic's does.
func (t *Translator) Chunk(dst []byte, c *chatstream.Chunk) []byte {
	if t.Stopped {
		return dst
	}
	if c.Usage != nil {
		t.usage = c.Usage
	}
	for k := range c.Choices {
		ch := &c.Choices[k]
		if ch.Index != 0 {
			continue
		}
		d := &ch.Delta
		hasContent := d.ReasoningContent != nil && *d.ReasoningContent != "" || d.Content != nil && *d.Content != "" || len(d.ToolCalls) > 0
		if hasContent || ch.FinishReason != nil {
			dst = t.start(dst)
		}
		if d.ReasoningContent != nil && *d.ReasoningContent != "" {
			var i int
			dst, i = t.openBlock(dst, "thinking", 0, nil)
			*t.Msg.Content[i].Thinking += *d.ReasoningContent
			dst = delta(dst, i, map[string]string{"type": "thinking_delta", "thinking": *d.ReasoningContent})
		}
		if d.Content != nil && *d.Content != "" {
			emit, matched := t.stop.push(*d.Content)
			dst = t.text(dst, emit)
			if matched != "" {
				t.Stopped, t.finish = true, "stop"
				t.Msg.StopSequence = &matched
				return dst
			}
		}
		if len(d.ToolCalls) > 0 {
			dst = t.text(dst, t.stop.flush())
		}
		for j := range d.ToolCalls {
			tc := &d.ToolCalls[j]
			var i int
			dst, i = t.openBlock(dst, "tool_use", tc.Index, tc)
			b := &t.Msg.Content[i]
			if b.Name == "" {
				b.Name = tc.Function.Name
			}
			if a := tc.Function.Arguments; a != "" {
				b.Input = append(b.Input, a...)
				dst = delta(dst, i, map[string]string{"type": "input_json_delta", "partial_json": a})
			}
		}
		if ch.FinishReason != nil {
			t.finish = *ch.FinishReason
		}
	}
	return dst
}

// End closes the open block and appends message_delta (stop reason,
// usage) and message_stop.
func (t *Translator) End(dst []byte) []byte {
	dst = t.start(dst)
	dst = t.text(dst, t.stop.flush())
	dst = t.closeOpen(dst)
	t.finalize()
	u := t.Msg.Usage
	return event(event(dst, "message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": *t.Msg.StopReason, "stop_sequence": t.Msg.StopSequence},
		"usage": map[string]int{"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens, "cache_read_input_tokens": u.CacheReadInputTokens, "cache_creation_input_tokens": 0}}),
		"message_stop", map[string]string{"type": "message_stop"})
}

// finalize sets the stop reason and usage, and makes every tool_use's
// input a JSON object (the arguments as streamed; {} when none came, and
// the text kept under "arguments" when it is not an object, so nothing
// the model wrote is dropped).
func (t *Translator) finalize() {
	sr := StopReason(t.finish)
	if t.Msg.StopSequence != nil {
		sr = "stop_sequence"
	}
	t.Msg.StopReason = &sr
	t.Msg.Usage = t.usageNow()
	for i := range t.Msg.Content {
		b := &t.Msg.Content[i]
		if b.Type != "tool_use" {
			continue
		}
		var obj map[string]json.RawMessage
		if len(b.Input) == 0 {
			b.Input = json.RawMessage("{}")
		} else if json.Unmarshal(b.Input, &obj) != nil || obj == nil {
			wrapped, _ := json.Marshal(map[string]string{"arguments": string(b.Input)})
			b.Input = wrapped
		}
	}
}

// Result finishes the translation for a non-streaming request.
func (t *Translator) Result() *Message {
	if rest := t.stop.flush(); rest != "" {
		t.text(nil, rest)
	}
	t.finalize()
	return t.Msg
}

// Fail appends an error event: the stream broke after it began.
func (t *Translator) Fail(dst []byte, e *openai.Error) []byte {
	ae := FromOpenAI(e, "")
	return append(append(append(dst, "event: error\ndata: "...), ae.JSON()...), "\n\n"...)
}
