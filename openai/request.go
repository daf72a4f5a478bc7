package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// Limits that do not depend on the model.
const (
	MaxStopSequences = 16
	MaxStopLength    = 1024
)

// StreamOptions is the stream_options object.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
	// ContinuousUsageStats is vLLM's extension: usage in every content
	// chunk, so a client (a router) sees the prompt and cached tokens with
	// the first token.
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// Sampling holds the generation parameters shared by chat and completions.
type Sampling struct {
	Stream              bool            `json:"stream"`
	StreamOptions       *StreamOptions  `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	Seed                *int64          `json:"seed"`
	Stop                StopList        `json:"stop"`
	N                   *int            `json:"n"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	MinTokens           int             `json:"min_tokens"`
	User                string          `json:"user"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	Logprobs            json.RawMessage `json:"logprobs"`
	StopTokenIDs        []int32         `json:"stop_token_ids"`
	// KVTransferParams is vLLM's P/D extension (NixlConnector): passed to
	// the engine as is, so a worker can play either leg of vLLM's proxy
	// protocol. Only a JSON object (or null) is accepted.
	KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	// ReturnTokenIDs is vLLM's return_token_ids extension (vLLM >= 0.10.2):
	// responses also carry the prompt's token ids and each choice's
	// generated token ids (prompt_token_ids, token_ids). A non-boolean
	// value is a 400 naming the field.
	ReturnTokenIDs bool `json:"return_token_ids"`
	// ReturnTokensAsTokenIDs is vLLM's option that names each logprobs
	// token (and alternative) "token_id:N" instead of its text, so a
	// client gets ids back exactly (what engine/upstream asks of vLLM, and
	// so of Tandem's own vLLM-compatible server).
	ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids"`

	// Filled by DecodeChat / DecodeCompletion from logprobs (and chat's
	// top_logprobs): whether log-probabilities were asked for, and how
	// many alternatives per position (0..MaxTopLogprobs). For completions
	// the legacy integer logprobs is both: present means wanted, its value
	// the alternatives.
	WantLogprobs bool `json:"-"`
	TopLogprobsN int  `json:"-"`
	// StructuredOutputs and the guided_* fields are vLLM's structured
	// output extensions (see structured.go).
	StructuredOutputs *StructuredOutputs `json:"structured_outputs"`
	Guided
	// Constraint is filled by Decode* from response_format,
	// structured_outputs, guided_* and tool_choice; nil for none.
	Constraint *Constraint `json:"-"`
}

// NumChoices is n, 1 when unset.
func (s *Sampling) NumChoices() int {
	if s.N == nil {
		return 1
	}
	return *s.N
}

// ChatRequest is a POST /v1/chat/completions body. Messages and Tools stay
// raw: the chat template needs them with their key order intact.
type ChatRequest struct {
	Model              string                     `json:"model"`
	Messages           json.RawMessage            `json:"messages"`
	Tools              json.RawMessage            `json:"tools"`
	ToolChoice         json.RawMessage            `json:"tool_choice"`
	ResponseFormat     *ResponseFormat            `json:"response_format"`
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
	TopLogprobs        *int                       `json:"top_logprobs"`
	// Tool calling and reasoning (see tools.go): parallel_tool_calls false
	// keeps the first call only; reasoning_effort is passed to the chat
	// template (gpt-oss reads it) unless chat_template_kwargs sets it.
	ParallelToolCalls *bool      `json:"parallel_tool_calls"`
	ReasoningEffort   *string    `json:"reasoning_effort"`
	Choice            ToolChoice `json:"-"` // tool_choice, decoded
	Sampling
}

// ResponseFormat is response_format: text, json_object or json_schema.
type ResponseFormat struct {
	Type       string            `json:"type"`
	JSONSchema *JSONSchemaFormat `json:"json_schema"`
}

// CompletionRequest is a POST /v1/completions body.
type CompletionRequest struct {
	Model  string          `json:"model"`
	Prompt json.RawMessage `json:"prompt"`
	Echo   bool            `json:"echo"`
	Suffix *string         `json:"suffix"`
	BestOf *int            `json:"best_of"`
	// ResponseFormat is accepted on completions too, as vLLM does.
	ResponseFormat *ResponseFormat `json:"response_format"`
	Sampling
	// Filled by Decode from Prompt: exactly one of the two is set.
	PromptText   string  `json:"-"`
	PromptTokens []int32 `json:"-"`
	HasTokens    bool    `json:"-"`
}

var errStopType = errors.New("stop must be a string or an array of strings")

// StopList accepts a string or a list of strings.
type StopList []string

func (s *StopList) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*s = nil
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = StopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errStopType
	}
	*s = many
	return nil
}

// Message is the part of a chat message the frontend validates.
type Message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// MaxNewTokens returns max_completion_tokens, else max_tokens, else 0
// (meaning: up to the context length).
func (s *Sampling) MaxNewTokens() int {
	if s.MaxCompletionTokens != nil {
		return *s.MaxCompletionTokens
	}
	if s.MaxTokens != nil {
		return *s.MaxTokens
	}
	return 0
}

// decodeStrict unmarshals body into v, mapping JSON errors to 400s that name
// the offending field.
func decodeStrict(body []byte, v any) *Error {
	if len(bytes.TrimSpace(body)) == 0 {
		return BadRequest("", "invalid_json", "request body is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			field := strings.TrimPrefix(te.Field, "Sampling.")
			return BadRequest(field, "invalid_type", "field %q: expected %s, got JSON %s", field, te.Type, te.Value)
		case errors.As(err, &se):
			return BadRequest("", "invalid_json", "malformed JSON at byte %d: %v", se.Offset, err)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return BadRequest("", "invalid_json", "malformed JSON: unexpected end of input")
		default:
			// Custom UnmarshalJSON errors carry no field name.
			if errors.Is(err, errStopType) {
				return BadRequest("stop", "invalid_type", "%v", errStopType)
			}
			return BadRequest("", "invalid_value", "%v", err)
		}
	}
	if dec.More() {
		return BadRequest("", "invalid_json", "trailing data after the JSON object")
	}
	return nil
}

func (s *Sampling) validate() *Error {
	if s.StreamOptions != nil && !s.Stream {
		return BadRequest("stream_options", "invalid_value", "stream_options is only allowed when stream is true")
	}
	if s.MaxTokens != nil && *s.MaxTokens < 1 {
		return BadRequest("max_tokens", "invalid_value", "max_tokens must be at least 1, got %d", *s.MaxTokens)
	}
	if s.MaxCompletionTokens != nil && *s.MaxCompletionTokens < 1 {
		return BadRequest("max_completion_tokens", "invalid_value", "max_completion_tokens must be at least 1, got %d", *s.MaxCompletionTokens)
	}
	if t := s.Temperature; t != nil && (math.IsNaN(*t) || *t < 0 || *t > 2) {
		return BadRequest("temperature", "invalid_value", "temperature must be between 0 and 2, got %v", *t)
	}
	if p := s.TopP; p != nil && (math.IsNaN(*p) || *p <= 0 || *p > 1) {
		return BadRequest("top_p", "invalid_value", "top_p must be in (0, 1], got %v", *p)
	}
	if k := s.TopK; k != nil && *k < -1 {
		return BadRequest("top_k", "invalid_value", "top_k must be -1 (disabled) or positive, got %d", *k)
	}
	for name, p := range map[string]*float64{"presence_penalty": s.PresencePenalty, "frequency_penalty": s.FrequencyPenalty} {
		if p != nil && (math.IsNaN(*p) || *p < -2 || *p > 2) {
			return BadRequest(name, "invalid_value", "%s must be between -2 and 2, got %v", name, *p)
		}
	}
	if s.N != nil && *s.N < 1 {
		return BadRequest("n", "invalid_value", "n must be at least 1, got %d", *s.N)
	}
	if s.N != nil && *s.N > MaxN {
		return BadRequest("n", "invalid_value", "n must be at most %d, got %d", MaxN, *s.N)
	}
	if s.N != nil && *s.N > 1 && len(bytes.TrimSpace(s.KVTransferParams)) > 0 && !bytes.Equal(bytes.TrimSpace(s.KVTransferParams), []byte("null")) {
		return BadRequest("n", "unsupported_value", "n > 1 cannot be combined with kv_transfer_params: one prefill leg hands over one sequence's KV blocks")
	}
	for i, t := range s.StopTokenIDs {
		if t < 0 {
			return BadRequest(fmt.Sprintf("stop_token_ids[%d]", i), "invalid_value", "token ids must be non-negative, got %d", t)
		}
	}
	if s.MinTokens < 0 {
		return BadRequest("min_tokens", "invalid_value", "min_tokens must not be negative")
	}
	if mx := s.MaxNewTokens(); mx > 0 && s.MinTokens > mx {
		return BadRequest("min_tokens", "invalid_value", "min_tokens (%d) exceeds the maximum tokens (%d)", s.MinTokens, mx)
	}
	if len(s.Stop) > MaxStopSequences {
		return BadRequest("stop", "invalid_value", "at most %d stop sequences are allowed, got %d", MaxStopSequences, len(s.Stop))
	}
	for _, st := range s.Stop {
		if st == "" || len(st) > MaxStopLength {
			return BadRequest("stop", "invalid_value", "stop sequences must be 1 to %d bytes long", MaxStopLength)
		}
	}
	if kp := bytes.TrimSpace(s.KVTransferParams); len(kp) > 0 {
		if bytes.Equal(kp, []byte("null")) {
			s.KVTransferParams = nil
		} else if kp[0] != '{' {
			return BadRequest("kv_transfer_params", "invalid_type", "kv_transfer_params must be an object")
		}
	}
	return nil
}

// chatLogprobs reads chat's logprobs (a boolean) and top_logprobs
// (0..MaxTopLogprobs, only with logprobs true: vLLM's check_logprobs in
// vllm/entrypoints/openai/protocol.py words the same refusal).
func (s *Sampling) chatLogprobs(top *int) *Error {
	lp := bytes.TrimSpace(s.Logprobs)
	switch {
	case len(lp) == 0, bytes.Equal(lp, []byte("null")), bytes.Equal(lp, []byte("false")):
	case bytes.Equal(lp, []byte("true")):
		s.WantLogprobs = true
	default:
		return BadRequest("logprobs", "invalid_type", "logprobs must be a boolean, got %.32s", lp)
	}
	if top == nil {
		return nil
	}
	if *top < 0 || *top > MaxTopLogprobs {
		return BadRequest("top_logprobs", "invalid_value", "top_logprobs must be between 0 and %d, got %d", MaxTopLogprobs, *top)
	}
	if *top > 0 && !s.WantLogprobs {
		return BadRequest("top_logprobs", "invalid_value", "when using top_logprobs, logprobs must be set to true")
	}
	s.TopLogprobsN = *top
	return nil
}

// completionLogprobs reads completions' legacy logprobs: an integer
// 0..MaxTopLogprobs, the alternatives per position (0: only the chosen
// token's). null or absent asks for none.
func (s *Sampling) completionLogprobs() *Error {
	lp := bytes.TrimSpace(s.Logprobs)
	if len(lp) == 0 || bytes.Equal(lp, []byte("null")) || bytes.Equal(lp, []byte("false")) {
		return nil // false: what this server accepted as "none" before logprobs were served
	}
	var n int
	if err := json.Unmarshal(lp, &n); err != nil {
		return BadRequest("logprobs", "invalid_type", "logprobs must be an integer (the alternatives per token) or null, got %.32s", lp)
	}
	if n < 0 || n > MaxTopLogprobs {
		return BadRequest("logprobs", "invalid_value", "logprobs must be between 0 and %d, got %d", MaxTopLogprobs, n)
	}
	s.WantLogprobs, s.TopLogprobsN = true, n
	return nil
}

// DecodeChat parses and validates a chat completions body. The returned
// messages are normalized for chat templates: content given as an array of
// text parts is joined into one string, as vLLM does.
func DecodeChat(body []byte) (*ChatRequest, *Error) {
	var r ChatRequest
	if e := decodeStrict(body, &r); e != nil {
		return nil, e
	}
	if r.Model == "" {
		return nil, BadRequest("model", "missing_field", "model is required")
	}
	if e := r.Sampling.validate(); e != nil {
		return nil, e
	}
	if e := r.Sampling.chatLogprobs(r.TopLogprobs); e != nil {
		return nil, e
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
	if e := r.checkToolFields(); e != nil {
		return nil, e
	}
	c, e := r.chatConstraint()
	if e != nil {
		return nil, e
	}
	r.Constraint = c
	return &r, nil
}

// checkTools accepts what OpenAI's API accepts for tools: an array of
// {"type":"function","function":{"name":...}} objects (the function's other
// fields are the template's business). Anything else is a 400 naming the
// element, as OpenAI answers (param "tools[0]").
func checkTools(raw json.RawMessage) *Error {
	var tools []json.RawMessage
	if err := json.Unmarshal(raw, &tools); err != nil {
		return BadRequest("tools", "invalid_type", "tools must be an array of tool objects")
	}
	for i, t := range tools {
		var tool struct {
			Type     *string `json:"type"`
			Function *struct {
				Name *string `json:"name"`
			} `json:"function"`
		}
		param := fmt.Sprintf("tools[%d]", i)
		if t = bytes.TrimSpace(t); len(t) == 0 || t[0] != '{' {
			return BadRequest(param, "invalid_type", "each tool must be an object, got %.32s", t)
		}
		if err := json.Unmarshal(t, &tool); err != nil {
			return BadRequest(param, "invalid_type", "tool: %v", err)
		}
		if tool.Type == nil || *tool.Type != "function" {
			return BadRequest(param+".type", "invalid_value", "tool type must be \"function\"")
		}
		if tool.Function == nil || tool.Function.Name == nil || *tool.Function.Name == "" {
			return BadRequest(param+".function.name", "missing_field", "a function tool needs function.name")
		}
	}
	return nil
}

var validRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

func normalizeMessages(raw json.RawMessage) (json.RawMessage, *Error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, BadRequest("messages", "missing_field", "messages is required")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, BadRequest("messages", "invalid_type", "messages must be an array of message objects")
	}
	if len(items) == 0 {
		return nil, BadRequest("messages", "invalid_value", "messages must not be empty")
	}
	changed := false
	for i, it := range items {
		var m Message
		if err := json.Unmarshal(it, &m); err != nil {
			return nil, BadRequest(fmt.Sprintf("messages[%d]", i), "invalid_type", "each message must be an object with a string role")
		}
		if !validRoles[m.Role] {
			return nil, BadRequest(fmt.Sprintf("messages[%d].role", i), "invalid_value", "unknown role %q", m.Role)
		}
		c := bytes.TrimSpace(m.Content)
		switch {
		case len(c) == 0 || bytes.Equal(c, []byte("null")):
			if m.Role != "assistant" {
				return nil, BadRequest(fmt.Sprintf("messages[%d].content", i), "missing_field", "content is required for role %q", m.Role)
			}
		case c[0] == '"':
		case c[0] == '[':
			text, e := joinTextParts(c, i)
			if e != nil {
				return nil, e
			}
			nm, err := replaceKey(it, "content", text)
			if err != nil {
				return nil, BadRequest(fmt.Sprintf("messages[%d]", i), "invalid_value", "%v", err)
			}
			items[i], changed = nm, true
		default:
			return nil, BadRequest(fmt.Sprintf("messages[%d].content", i), "invalid_type", "content must be a string or an array of content parts")
		}
	}
	if !changed {
		return raw, nil
	}
	out, err := json.Marshal(items)
	if err != nil {
		return nil, Internal("encode_failed", "re-encoding messages: %v", err)
	}
	return out, nil
}

func joinTextParts(c []byte, i int) (string, *Error) {
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(c, &parts); err != nil {
		return "", BadRequest(fmt.Sprintf("messages[%d].content", i), "invalid_type", "content parts must be objects")
	}
	var sb strings.Builder
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", BadRequest(fmt.Sprintf("messages[%d].content[%d]", i, j), "unsupported_value", "only text content parts are supported, got %q", p.Type)
		}
		if j > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(*p.Text)
	}
	return sb.String(), nil
}

// replaceKey re-emits a JSON object with key's value replaced by a string,
// keeping every other key in its original order (templates' tojson shows
// order).
func replaceKey(obj json.RawMessage, key, val string) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.WriteByte('{')
	first := true
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if !first {
			out.WriteByte(',')
		}
		first = false
		kb, _ := json.Marshal(k)
		out.Write(kb)
		out.WriteByte(':')
		if k == key {
			vb, _ := json.Marshal(val)
			out.Write(vb)
		} else {
			out.Write(v)
		}
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// DecodeCompletion parses and validates a completions body. A prompt may be a
// string, a list holding one string, a list of token ids, or a list holding
// one list of token ids.
func DecodeCompletion(body []byte) (*CompletionRequest, *Error) {
	var r CompletionRequest
	if e := decodeStrict(body, &r); e != nil {
		return nil, e
	}
	if r.Model == "" {
		return nil, BadRequest("model", "missing_field", "model is required")
	}
	if e := r.Sampling.validate(); e != nil {
		return nil, e
	}
	if e := r.Sampling.completionLogprobs(); e != nil {
		return nil, e
	}
	if r.Echo {
		return nil, BadRequest("echo", "unsupported_value", "echo is not supported")
	}
	if r.Suffix != nil && *r.Suffix != "" {
		return nil, BadRequest("suffix", "unsupported_value", "suffix is not supported")
	}
	if r.BestOf != nil && *r.BestOf != 1 {
		return nil, BadRequest("best_of", "unsupported_value", "only best_of=1 is supported")
	}
	if e := r.parsePrompt(); e != nil {
		return nil, e
	}
	c, e := constraintOf(r.ResponseFormat, &r.Sampling)
	if e != nil {
		return nil, e
	}
	r.Constraint = c
	return &r, nil
}

// plainTokenIDs parses the common token-id prompt, a non-empty JSON array
// of non-negative integers that fit int32, by hand: routers and benchmark
// replays send thousands of ids per request, and decoding each through
// encoding/json costs more than the rest of the request. Anything else
// (strings, nesting, signs, fractions, exponents, leading zeros, overflow,
// an empty array) reports ok false and takes the general path, which also
// words the errors.
func plainTokenIDs(p []byte) (ids []int32, ok bool) {
	i := 1 // past '['
	skip := func() {
		for i < len(p) && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r') {
			i++
		}
	}
	ids = make([]int32, 0, len(p)/6)
	for {
		skip()
		start := i
		var v int64
		for i < len(p) && p[i] >= '0' && p[i] <= '9' {
			v = v*10 + int64(p[i]-'0')
			if v > math.MaxInt32 {
				return nil, false
			}
			i++
		}
		if i == start || (p[start] == '0' && i-start > 1) {
			return nil, false
		}
		ids = append(ids, int32(v))
		skip()
		if i >= len(p) {
			return nil, false
		}
		switch p[i] {
		case ',':
			i++
		case ']':
			i++
			skip()
			return ids, i == len(p)
		default:
			return nil, false
		}
	}
}

// parsePrompt accepts the shapes OpenAI's completions API accepts for one
// prompt: a string, an array of token ids, or an array holding exactly one
// of those. Deeper nesting and non-integer ids (null included) are 400s.
func (r *CompletionRequest) parsePrompt() *Error { return r.parsePromptAt(0) }

func (r *CompletionRequest) parsePromptAt(depth int) *Error {
	p := bytes.TrimSpace(r.Prompt)
	if len(p) == 0 || bytes.Equal(p, []byte("null")) {
		return BadRequest("prompt", "missing_field", "prompt is required")
	}
	switch p[0] {
	case '"':
		if err := json.Unmarshal(p, &r.PromptText); err != nil {
			return BadRequest("prompt", "invalid_type", "prompt: %v", err)
		}
		return nil
	case '[':
		if ids, ok := plainTokenIDs(p); ok {
			r.PromptTokens, r.HasTokens = ids, true
			return nil
		}
	default:
		return BadRequest("prompt", "invalid_type", "prompt must be a string, an array of token ids, or an array with one of those")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(p, &items); err != nil {
		return BadRequest("prompt", "invalid_type", "prompt: %v", err)
	}
	if len(items) == 0 {
		return BadRequest("prompt", "invalid_value", "prompt must not be empty")
	}
	first := bytes.TrimSpace(items[0])
	switch {
	case len(first) > 0 && (first[0] == '"' || first[0] == '['):
		if len(items) != 1 {
			return BadRequest("prompt", "unsupported_value", "batched prompts are not supported; send %d requests", len(items))
		}
		if depth > 0 {
			return BadRequest("prompt", "invalid_type", "prompt must be a string, an array of token ids, or an array with one of those; got a deeper nesting")
		}
		r.Prompt = first
		return r.parsePromptAt(depth + 1)
	default:
		ids := make([]int32, 0, len(items))
		for i, it := range items {
			var v int64
			// json.Unmarshal of null into an int64 is no error and
			// leaves 0: only a bare integer is a token id.
			it = bytes.TrimSpace(it)
			if len(it) == 0 || it[0] < '0' || it[0] > '9' {
				if len(it) > 0 && it[0] == '-' {
					return BadRequest(fmt.Sprintf("prompt[%d]", i), "invalid_value", "token ids must be non-negative integers, got %.32s", it)
				}
				return BadRequest(fmt.Sprintf("prompt[%d]", i), "invalid_type", "token ids must be non-negative integers, got %.32s", it)
			}
			if err := json.Unmarshal(it, &v); err != nil || v < 0 || v > math.MaxInt32 {
				return BadRequest(fmt.Sprintf("prompt[%d]", i), "invalid_value", "token ids must be non-negative integers")
			}
			ids = append(ids, int32(v))
		}
		r.PromptTokens, r.HasTokens = ids, true
		return nil
	}
}
