package responses

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/tandemllm/tandem/openai"
	"github.com/tandemllm/tandem/openai/chatstream"
)

// Response is the Responses API's response object.
type Response struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Error              *ResponseError    `json:"error"`
	IncompleteDetails  *Incomplete       `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Model              string            `json:"model"`
	Output             []OutputItem      `json:"output"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Reasoning          ReasoningOut      `json:"reasoning"`
	Store              bool              `json:"store"`
	Temperature        *float64          `json:"temperature"`
	Text               TextOut           `json:"text"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	Tools              []json.RawMessage `json:"tools"`
	TopP               *float64          `json:"top_p"`
	Truncation         string            `json:"truncation"`
	Usage              *Usage            `json:"usage"`
	User               *string           `json:"user"`
	Metadata           map[string]string `json:"metadata"`
}

// ReasoningOut is the response's reasoning configuration (null fields
// when the request set none).
type ReasoningOut struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

// ResponseError is a failed response's error.
type ResponseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Incomplete says why a response is incomplete.
type Incomplete struct {
	Reason string `json:"reason"`
}

// TextOut is the response's text configuration.
type TextOut struct {
	Format json.RawMessage `json:"format"`
}

// Usage is the Responses usage object.
type Usage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// OutputItem is one output item: a message, a function call or a
// reasoning item; MarshalJSON writes the fields of its type.
type OutputItem struct {
	Type   string
	ID     string
	Status string
	// message: its one output_text part; reasoning: its reasoning_text.
	Text     string
	Logprobs []json.RawMessage
	// function_call
	CallID    string
	Name      string
	Arguments string
}

// MarshalJSON writes the item in OpenAI's shape for its type.
func (it OutputItem) MarshalJSON() ([]byte, error) {
	switch it.Type {
	case "function_call":
		return json.Marshal(struct {
			Type      string `json:"type"`
			ID        string `json:"id"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
			Status    string `json:"status"`
		}{it.Type, it.ID, it.CallID, it.Name, it.Arguments, it.Status})
	case "reasoning":
		content := []part{}
		if it.Status == "completed" {
			content = append(content, it.part())
		}
		return json.Marshal(struct {
			Type    string   `json:"type"`
			ID      string   `json:"id"`
			Summary []string `json:"summary"`
			Content []part   `json:"content"`
			Status  string   `json:"status"`
		}{it.Type, it.ID, []string{}, content, it.Status})
	}
	content := []part{}
	if it.Status == "completed" {
		content = append(content, it.part())
	}
	return json.Marshal(struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Status  string `json:"status"`
		Role    string `json:"role"`
		Content []part `json:"content"`
	}{"message", it.ID, it.Status, "assistant", content})
}

// part is a content part: output_text (with annotations and logprobs) or
// reasoning_text; MarshalJSON writes the fields of its type.
type part struct {
	Type     string
	Text     string
	Logprobs []json.RawMessage
}

func (it *OutputItem) part() part {
	if it.Type == "reasoning" {
		return part{Type: "reasoning_text", Text: it.Text}
	}
	return part{Type: "output_text", Text: it.Text, Logprobs: it.Logprobs}
}

// MarshalJSON keeps output_text's empty annotations and logprobs lists
// (the SDKs read them as arrays) while reasoning_text goes without.
func (p part) MarshalJSON() ([]byte, error) {
	if p.Type == "output_text" {
		lp := p.Logprobs
		if lp == nil {
			lp = []json.RawMessage{}
		}
		return json.Marshal(struct {
			Type        string            `json:"type"`
			Text        string            `json:"text"`
			Annotations []struct{}        `json:"annotations"`
			Logprobs    []json.RawMessage `json:"logprobs"`
		}{p.Type, p.Text, []struct{}{}, lp})
	}
	return json.Marshal(struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{p.Type, p.Text})
}

// OutputText is the text of the response's message items, as the SDKs'
// output_text convenience joins it.
func (r *Response) OutputText() string {
	var sb strings.Builder
	for _, it := range r.Output {
		if it.Type == "message" {
			sb.WriteString(it.Text)
		}
	}
	return sb.String()
}

// NewResponse starts the response object for r.
func NewResponse(id string, created int64, r *Request) *Response {
	resp := &Response{ID: id, Object: "response", CreatedAt: created, Status: "in_progress", Model: r.Model,
		Instructions: r.Instructions, MaxOutputTokens: r.MaxOutputTokens, Output: []OutputItem{},
		ParallelToolCalls: r.ParallelToolCalls == nil || *r.ParallelToolCalls, Store: r.Store == nil || *r.Store,
		Temperature: r.Temperature, TopP: r.TopP, Truncation: "disabled", Tools: r.Tools, Metadata: r.Metadata,
		ToolChoice: r.ToolChoice, Text: TextOut{Format: json.RawMessage(`{"type":"text"}`)}}
	if r.Tools == nil {
		resp.Tools = []json.RawMessage{}
	}
	if len(resp.ToolChoice) == 0 {
		resp.ToolChoice = json.RawMessage(`"auto"`)
	}
	if resp.Metadata == nil {
		resp.Metadata = map[string]string{}
	}
	if r.PreviousResponseID != "" {
		p := r.PreviousResponseID
		resp.PreviousResponseID = &p
	}
	if r.User != "" {
		u := r.User
		resp.User = &u
	}
	if r.Reasoning != nil {
		if e := r.Reasoning.Effort; e != "" {
			resp.Reasoning.Effort = &e
		}
		if sm := r.Reasoning.Summary; sm != "" {
			resp.Reasoning.Summary = &sm
		}
	}
	if r.Text != nil && len(r.Text.Format) > 0 {
		resp.Text.Format = r.Text.Format
	}
	return resp
}

// Translator turns one chat stream into Responses streaming events and
// the final Response. It is not safe for concurrent use.
type Translator struct {
	Resp *Response
	seq  int
	open int         // output index of the open item, -1 for none
	ids  map[int]int // chat tool-call index → output index
	// Finish is the chat finish_reason.
	Finish string
	usage  *chatstream.Usage
}

// NewTranslator returns a translator that fills resp.
func NewTranslator(resp *Response) *Translator {
	return &Translator{Resp: resp, open: -1, ids: map[int]int{}}
}

// event appends one SSE event of type typ; fields are the event's other
// fields, written after type and sequence_number in the order given.
func (t *Translator) event(dst []byte, typ string, fields ...any) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":"...)
	dst = openai.AppendString(dst, typ)
	dst = append(dst, `,"sequence_number":`...)
	dst = strconv.AppendInt(dst, int64(t.seq), 10)
	t.seq++
	for i := 0; i+1 < len(fields); i += 2 {
		dst = append(dst, ',')
		dst = openai.AppendString(dst, fields[i].(string))
		dst = append(dst, ':')
		switch v := fields[i+1].(type) {
		case string:
			dst = openai.AppendString(dst, v)
		case int:
			dst = strconv.AppendInt(dst, int64(v), 10)
		default:
			b, _ := json.Marshal(v) // the package's own types
			dst = append(dst, b...)
		}
	}
	return append(dst, "}\n\n"...)
}

// Start appends response.created and response.in_progress.
func (t *Translator) Start(dst []byte) []byte {
	dst = t.event(dst, "response.created", "response", t.Resp)
	return t.event(dst, "response.in_progress", "response", t.Resp)
}

func (t *Translator) itemID(prefix string) string {
	return prefix + strings.TrimPrefix(t.Resp.ID, "resp_") + "_" + strconv.Itoa(len(t.Resp.Output))
}

// openItem closes the open item unless it is of type typ (and, for calls,
// the same call), and opens a new one when needed. It returns the output
// index of the item to write to.
func (t *Translator) openItem(dst []byte, typ string, callIdx int, call *chatstream.ToolCallDelta) ([]byte, int) {
	if typ == "function_call" {
		if i, ok := t.ids[callIdx]; ok {
			return dst, i
		}
	} else if t.open >= 0 && t.Resp.Output[t.open].Type == typ {
		return dst, t.open
	}
	dst = t.closeOpen(dst)
	it := OutputItem{Type: typ, Status: "in_progress"}
	switch typ {
	case "message":
		it.ID = t.itemID("msg_")
	case "reasoning":
		it.ID = t.itemID("rs_")
	case "function_call":
		it.ID, it.CallID, it.Name = t.itemID("fc_"), call.ID, call.Function.Name
		if it.CallID == "" {
			it.CallID = "call_" + strings.TrimPrefix(it.ID, "fc_")
		}
	}
	t.Resp.Output = append(t.Resp.Output, it)
	t.open = len(t.Resp.Output) - 1
	if typ == "function_call" {
		t.ids[callIdx] = t.open
	}
	dst = t.event(dst, "response.output_item.added", "output_index", t.open, "item", it)
	if typ != "function_call" {
		p := OutputItem{Type: typ}
		dst = t.event(dst, "response.content_part.added", "item_id", it.ID, "output_index", t.open, "content_index", 0, "part", p.part())
	}
	return dst, t.open
}

// closeOpen appends the done events of the open item.
func (t *Translator) closeOpen(dst []byte) []byte {
	if t.open < 0 {
		return dst
	}
	i := t.open
	t.open = -1
	it := &t.Resp.Output[i]
	it.Status = "completed"
	switch it.Type {
	case "message":
		lp := it.Logprobs
		if lp == nil {
			lp = []json.RawMessage{}
		}
		dst = t.event(dst, "response.output_text.done", "item_id", it.ID, "output_index", i, "content_index", 0, "text", it.Text, "logprobs", lp)
		dst = t.event(dst, "response.content_part.done", "item_id", it.ID, "output_index", i, "content_index", 0, "part", it.part())
	case "reasoning":
		dst = t.event(dst, "response.reasoning_text.done", "item_id", it.ID, "output_index", i, "content_index", 0, "text", it.Text)
		dst = t.event(dst, "response.content_part.done", "item_id", it.ID, "output_index", i, "content_index", 0, "part", it.part())
	case "function_call":
		if it.Arguments == "" {
			it.Arguments = "{}"
		}
		dst = t.event(dst, "response.function_call_arguments.done", "item_id", it.ID, "output_index", i, "name", it.Name, "arguments", it.Arguments)
	}
	return t.event(dst, "response.output_item.done", "output_index", i, "item", *it)
}

// logprobsContent is chat's choice.logprobs.content.
type logprobsContent struct {
	Content []json.RawMessage `json:"content"`
}

// Chunk appends the events of one chat chunk.
func (t *Translator) Chunk(dst []byte, c *chatstream.Chunk) []byte {
	if c.Usage != nil {
		t.usage = c.Usage
	}
	for k := range c.Choices {
		ch := &c.Choices[k]
		if ch.Index != 0 {
			continue // the translators ask for one choice
		}
		d := &ch.Delta
		if d.ReasoningContent != nil && *d.ReasoningContent != "" {
			var i int
			dst, i = t.openItem(dst, "reasoning", 0, nil)
			it := &t.Resp.Output[i]
			it.Text += *d.ReasoningContent
			dst = t.event(dst, "response.reasoning_text.delta", "item_id", it.ID, "output_index", i, "content_index", 0, "delta", *d.ReasoningContent)
		}
		if d.Content != nil && *d.Content != "" {
			var i int
			dst, i = t.openItem(dst, "message", 0, nil)
			it := &t.Resp.Output[i]
			it.Text += *d.Content
			lp := []json.RawMessage{}
			if len(ch.Logprobs) > 0 && string(ch.Logprobs) != "null" {
				var l logprobsContent
				if json.Unmarshal(ch.Logprobs, &l) == nil && l.Content != nil {
					lp = l.Content
					it.Logprobs = append(it.Logprobs, l.Content...)
				}
			}
			dst = t.event(dst, "response.output_text.delta", "item_id", it.ID, "output_index", i, "content_index", 0, "delta", *d.Content, "logprobs", lp)
		}
		for j := range d.ToolCalls {
			tc := &d.ToolCalls[j]
			var i int
			dst, i = t.openItem(dst, "function_call", tc.Index, tc)
			it := &t.Resp.Output[i]
			if it.Name == "" && tc.Function.Name != "" {
				it.Name = tc.Function.Name
			}
			if a := tc.Function.Arguments; a != "" {
				it.Arguments += a
				dst = t.event(dst, "response.function_call_arguments.delta", "item_id", it.ID, "output_index", i, "delta", a)
			}
		}
		if ch.FinishReason != nil {
			t.Finish = *ch.FinishReason
		}
	}
	return dst
}

// Usage is the Responses usage of the chat usage seen so far.
func (t *Translator) Usage() *Usage {
	if t.usage == nil {
		return nil
	}
	u := &Usage{InputTokens: t.usage.PromptTokens, OutputTokens: t.usage.CompletionTokens, TotalTokens: t.usage.TotalTokens}
	u.InputTokensDetails.CachedTokens = t.usage.Cached()
	u.OutputTokensDetails.ReasoningTokens = t.usage.Reasoning()
	return u
}

// End closes the open item and sets the response's final status:
// completed, or incomplete (reason max_output_tokens) when the chat
// stream stopped at its length limit. It appends response.completed or
// response.incomplete.
func (t *Translator) End(dst []byte) []byte {
	dst = t.closeOpen(dst)
	t.Resp.Usage = t.Usage()
	if t.Finish == "length" {
		t.Resp.Status, t.Resp.IncompleteDetails = "incomplete", &Incomplete{Reason: "max_output_tokens"}
		return t.event(dst, "response.incomplete", "response", t.Resp)
	}
	t.Resp.Status = "completed"
	return t.event(dst, "response.completed", "response", t.Resp)
}

// Fail marks the response failed with e and appends response.failed.
func (t *Translator) Fail(dst []byte, e *openai.Error) []byte {
	dst = t.closeOpen(dst)
	t.Resp.Status = "failed"
	code := e.Code
	if code == "" {
		code = "server_error"
	}
	t.Resp.Error = &ResponseError{Code: code, Message: e.Message}
	t.Resp.Usage = t.Usage()
	return t.event(dst, "response.failed", "response", t.Resp)
}

// Conversation is the chat messages of the response's output, appended to
// conv: one assistant message holding its reasoning, text and calls.
func (t *Translator) Conversation(conv []chatstream.Message) []chatstream.Message {
	if len(t.Resp.Output) == 0 {
		return conv
	}
	m := chatstream.Message{Role: "assistant", Content: json.RawMessage("null")}
	var text strings.Builder
	for _, it := range t.Resp.Output {
		switch it.Type {
		case "reasoning":
			m.ReasoningContent += it.Text
		case "message":
			text.WriteString(it.Text)
		case "function_call":
			m.ToolCalls = append(m.ToolCalls, chatstream.ToolCall{ID: it.CallID, Type: "function",
				Function: chatstream.FunctionCall{Name: it.Name, Arguments: it.Arguments}})
		}
	}
	if text.Len() > 0 || len(m.ToolCalls) == 0 {
		m.Content = chatstream.Text(text.String())
	}
	return append(conv, m)
}
