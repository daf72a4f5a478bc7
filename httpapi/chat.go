package httpapi

import (
	"encoding/json"
	"strings"

	"github.com/tandemllm/tandem/chatparse"
	"github.com/tandemllm/tandem/openai"
	"github.com/tandemllm/tandem/tokenid"
	"github.com/tandemllm/tandem/tokenizer"
)

// chatParsers is a model's parsers, resolved once in AddModel.
type chatParsers struct {
	tool, reasoning string
	// keep is the tokenizer as the chat parser's detokenizer sees it:
	// special tokens that are parser markers stay text. nil: none needed.
	keep tokenizer.Tokenizer
}

// resolveParsers picks m's parsers: the configured names ("none" turns a
// kind off), else what its chat template implies.
func (s *Server) resolveParsers(m *tokenizer.Model) chatParsers {
	var p chatParsers
	var src string
	if t, ok := m.Template.(interface{ Source() string }); ok {
		src = t.Source()
	}
	dt, dr := chatparse.Detect(src)
	p.tool, p.reasoning = dt, dr
	if n := s.cfg.ToolCallParser; n != "" {
		p.tool, _ = chatparse.CanonicalTool(n) // checked by the CLI
	}
	if n := s.cfg.ReasoningParser; n != "" {
		p.reasoning, _ = chatparse.CanonicalReasoning(n)
	}
	if s.log != nil {
		s.log.Info("chat parsers", "model", m.Name, "tool_call_parser", orNone(p.tool), "reasoning_parser", orNone(p.reasoning),
			"detected", s.cfg.ToolCallParser == "" || s.cfg.ReasoningParser == "")
	}
	sp, ok := m.Tokenizer.(tokenizer.SpecialTokens)
	if !ok {
		return p
	}
	keep := map[tokenid.ID]bool{}
	for _, mk := range chatparse.Markers(p.tool, p.reasoning) {
		if ids := m.Tokenizer.Encode(mk); len(ids) == 1 && sp.IsSpecial(ids[0]) {
			keep[ids[0]] = true
		}
	}
	if len(keep) > 0 {
		p.keep = keepSpecial{Tokenizer: m.Tokenizer, sp: sp, keep: keep}
	}
	return p
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// keepSpecial reports the parser's marker tokens as not special, so the
// detokenizer's skip_special_tokens keeps them in the text.
type keepSpecial struct {
	tokenizer.Tokenizer
	sp   tokenizer.SpecialTokens
	keep map[tokenid.ID]bool
}

func (k keepSpecial) IsSpecial(id tokenid.ID) bool { return !k.keep[id] && k.sp.IsSpecial(id) }

// chatPlan is how one chat request's reply is parsed.
type chatPlan struct {
	opts     chatparse.Options
	choice   openai.ToolChoice
	tools    json.RawMessage
	parallel bool
	parsers  chatParsers
}

// planChat decides a chat request's parsing: reasoning whenever the model
// has a reasoning parser; tool calls when the request has tools and
// tool_choice is not "none". A request with tools whose model has no tool
// parser is refused (as vLLM refuses auto tool choice without one) rather
// than answered with the call as text.
func (s *Server) planChat(m *Model, req *openai.ChatRequest, prompt string) (*chatPlan, *openai.Error) {
	p := &chatPlan{choice: req.Choice, tools: req.Tools, parallel: req.ParallelToolCalls == nil || *req.ParallelToolCalls, parsers: m.parsers}
	p.opts.ReasoningParser = m.parsers.reasoning
	if req.Choice.Mode != "none" {
		if m.parsers.tool == "" {
			return nil, openai.BadRequest("tools", "unsupported_value", "model %q has no tool-call parser: start the server with --tool-call-parser NAME (one of %s)", m.Name, strings.Join(chatparse.ToolParsers, ", "))
		}
		p.opts.ToolParser = m.parsers.tool
		p.opts.Tools = chatparse.ToolsFromJSON(req.Tools)
	}
	if p.opts.ToolParser == "" && p.opts.ReasoningParser == "" {
		return nil, nil
	}
	// A template that opens the reasoning block in the prompt (DeepSeek-R1,
	// Qwen3 thinking models) leaves the reply inside it.
	tail := strings.TrimRight(prompt, " \t\r\n")
	p.opts.PromptOpensReasoning = p.opts.ReasoningParser != "" && (strings.HasSuffix(tail, "<think>") || strings.HasSuffix(tail, "◁think▷"))
	return p, nil
}

// templateKwargs adds reasoning_effort to the template's variables (the
// gpt-oss template reads it) unless chat_template_kwargs sets it.
func templateKwargs(req *openai.ChatRequest) map[string]json.RawMessage {
	kw := req.ChatTemplateKwargs
	if req.ReasoningEffort == nil {
		return kw
	}
	if _, ok := kw["reasoning_effort"]; ok {
		return kw
	}
	out := make(map[string]json.RawMessage, len(kw)+1)
	for k, v := range kw {
		out[k] = v
	}
	b, _ := json.Marshal(*req.ReasoningEffort)
	out["reasoning_effort"] = b
	return out
}

// chatState is one reply's parser and what it has said so far.
type chatState struct {
	plan      *chatPlan
	p         *chatparse.Stream
	calls     int // calls started
	counted   int // completion tokens already classified
	reasoning int // of them, reasoning tokens
	res       chatparse.Collector
}

// start makes the parser. A forced tool_choice needs no parser mode of
// its own: structured outputs constrain the reply to the model family's
// call syntax (openai.Sampling.Constraint), which the parser reads as it
// reads an unforced call.
func (c *chatState) start() error {
	p, err := chatparse.New(c.plan.opts)
	c.p = p
	return err
}

// feed parses one delta's text (and, when done, the end of the reply) and
// counts its reasoning tokens: all of the delta's tokens when it begins and
// ends inside reasoning; when it crosses a reasoning boundary (an engine
// that ran ahead sends several tokens in one delta), the share of its text
// that was reasoning, at least one token.
func (c *chatState) feed(text string, completion int, done bool) chatparse.Out {
	n := completion - c.counted
	c.counted = completion
	was := c.p.Reasoning()
	out := c.p.Feed(text)
	if done {
		f := c.p.Flush()
		out.Reasoning += f.Reasoning
		out.Content += f.Content
		out.Calls = append(out.Calls, f.Calls...)
	}
	switch {
	case n <= 0:
	case was && c.p.Reasoning():
		c.reasoning += n
	case out.Reasoning != "" || was:
		c.reasoning += min(n, max(1, n*len(out.Reasoning)/max(1, len(text))))
	}
	if !c.plan.parallel && len(out.Calls) > 0 {
		// parallel_tool_calls false: the first call only.
		kept := out.Calls[:0]
		for _, d := range out.Calls {
			if d.Index == 0 {
				kept = append(kept, d)
			}
		}
		out.Calls = kept
	}
	for _, d := range out.Calls {
		c.calls = max(c.calls, d.Index+1)
	}
	c.res.Add(out)
	return out
}

// finish is the reply's finish_reason: "tool_calls" when it made calls
// and ended by itself.
func (c *chatState) finish(f string) string {
	if c != nil && c.calls > 0 && f == "stop" {
		return "tool_calls"
	}
	return f
}

// appendChunk writes one delta's parsed parts as a chunk, if any.
func (c *chatState) appendChunk(dst []byte, h *openai.ChunkHeader, out chatparse.Out) []byte {
	if out.Reasoning == "" && out.Content == "" && len(out.Calls) == 0 {
		return dst
	}
	var calls []openai.CallDelta
	if len(out.Calls) > 0 {
		calls = make([]openai.CallDelta, len(out.Calls))
		for i, d := range out.Calls {
			calls[i] = openai.CallDelta(d)
		}
	}
	return h.AppendDeltaChunk(dst, out.Reasoning, out.Content, calls, "")
}

// message is the non-streaming reply's message.
func (c *chatState) message() openai.AssistantMessage {
	r := c.res.Result
	msg := openai.AssistantMessage{Role: "assistant", Content: r.Content, ReasoningContent: r.Reasoning}
	for _, tc := range r.Calls {
		msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{ID: tc.ID, Type: "function", Function: openai.ToolCallFunction{Name: tc.Name, Arguments: tc.Arguments}})
	}
	if len(msg.ToolCalls) > 0 && strings.TrimSpace(msg.Content) == "" {
		msg.Content = "" // null beside the calls, as OpenAI sends it
	}
	return msg
}

// details is usage.completion_tokens_details when the model reasons.
func (c *chatState) details() *openai.CompletionTokensDetails {
	if c == nil || c.plan.opts.ReasoningParser == "" {
		return nil
	}
	return &openai.CompletionTokensDetails{ReasoningTokens: c.reasoning}
}
