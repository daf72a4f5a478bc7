package chatparse

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// ToolCall is one parsed call: Arguments is a JSON object's text.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// CallDelta is a piece of a streamed call. A call's first delta carries
// its ID and Name (and possibly the start of Arguments); later ones only
// more Arguments text. Index counts calls from 0 within a reply.
type CallDelta struct {
	Index     int
	ID, Name  string
	Arguments string
}

// Out is what one Feed or Flush releases.
type Out struct {
	Reasoning string
	Content   string
	Calls     []CallDelta
}

func (o *Out) empty() bool { return o.Reasoning == "" && o.Content == "" && len(o.Calls) == 0 }

// Result is a whole reply, parsed.
type Result struct {
	Reasoning string
	Content   string
	Calls     []ToolCall
}

// Tool is what a parser needs to know of a request's tool: its name and the
// JSON Schema type of each parameter (the XML families write every value as
// text, and the schema says which are numbers, booleans or objects).
type Tool struct {
	Name   string
	Params map[string]string // parameter name → JSON Schema "type"
}

// ToolsFromJSON reads the names and parameter types of an OpenAI `tools`
// array (already validated by the openai package); unreadable entries are
// skipped.
func ToolsFromJSON(raw []byte) []Tool {
	var in []struct {
		Function struct {
			Name       string `json:"name"`
			Parameters struct {
				Properties map[string]struct {
					Type json.RawMessage `json:"type"`
				} `json:"properties"`
			} `json:"parameters"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &in) != nil {
		return nil
	}
	out := make([]Tool, 0, len(in))
	for _, t := range in {
		tool := Tool{Name: t.Function.Name, Params: map[string]string{}}
		for k, p := range t.Function.Parameters.Properties {
			var s string
			if json.Unmarshal(p.Type, &s) == nil {
				tool.Params[k] = s
				continue
			}
			// ["integer", "null"] and the like: the first non-null type.
			var list []string
			if json.Unmarshal(p.Type, &list) == nil {
				for _, v := range list {
					if v != "null" {
						tool.Params[k] = v
						break
					}
				}
			}
		}
		out = append(out, tool)
	}
	return out
}

// Options configure a Stream.
type Options struct {
	// ToolParser names the tool-call family ("" or "none": no tool calls
	// are parsed). See ToolParsers.
	ToolParser string
	// ReasoningParser names the reasoning family ("" or "none": none).
	ReasoningParser string
	// Tools are the request's tools (parameter types for the XML families).
	Tools []Tool
	// PromptOpensReasoning says the rendered prompt ends inside a reasoning
	// block (the template wrote "<think>\n" after the generation prompt,
	// as DeepSeek-R1's and Qwen3 thinking models' do): the reply starts as
	// reasoning.
	PromptOpensReasoning bool
	// ForceName: the reply is the arguments of this function (tool_choice
	// names it and structured outputs constrain the reply to them).
	// ForceList: the reply is vLLM's forced JSON array of calls
	// (tool_choice "required" under structured outputs). See forced.go.
	ForceName string
	ForceList bool
	// NewID makes tool call ids; nil: "call_" and 24 random letters and
	// digits (9 for mistral, whose templates insist on that length).
	NewID func() string
}

// toolParser is the tool half of a Stream; reasoner the reasoning half.
type toolParser interface {
	feed(text string, out *Out)
	flush(out *Out)
}

type reasoner interface {
	// feed splits text into reasoning and content.
	feed(text string) (reasoning, content string)
	flush() (reasoning, content string)
	// reasoning reports whether the text so far ends inside reasoning.
	reasoning() bool
}

// Stream parses one reply incrementally. It is not safe for concurrent use.
type Stream struct {
	r     reasoner
	t     toolParser
	calls int // calls started, for Calls
	// combined is set for families (harmony) whose one parser does both.
	combined toolParser
}

// ToolParsers and ReasoningParsers list the accepted names (vLLM's).
var (
	ToolParsers      = []string{"hermes", "qwen3_coder", "llama3_json", "mistral", "deepseek_v3", "deepseek_v31", "openai", "kimi_k2", "glm45", "pythonic"}
	ReasoningParsers = []string{"deepseek_r1", "qwen3", "gpt_oss", "granite", "kimi"}
)

// aliases maps other spellings to the names above.
var aliases = map[string]string{
	"qwen": "hermes", "qwen2_5": "hermes", "qwen3": "hermes", "qwen3_xml": "qwen3_coder",
	"llama3": "llama3_json", "llama4_json": "llama3_json", "llama": "llama3_json",
	"deepseek_r1": "deepseek_v3", "deepseek": "deepseek_v3", "deepseek_v3_1": "deepseek_v31",
	"gpt_oss": "openai", "harmony": "openai", "kimi": "kimi_k2", "glm4_moe": "glm45", "glm4_5": "glm45",
	"llama4_pythonic": "pythonic",
}

var reasoningAliases = map[string]string{
	"openai_gptoss": "gpt_oss", "openai": "gpt_oss", "harmony": "gpt_oss", "deepseek": "deepseek_r1",
	"kimi_k2": "kimi", "granite_3_2": "granite", "glm45": "qwen3", "deepseek_v3": "deepseek_r1",
}

func norm(name string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(name)), "-", "_")
}

// CanonicalTool returns the canonical tool parser name for name ("" for
// none), or an error naming the choices.
func CanonicalTool(name string) (string, error) {
	n := norm(name)
	if n == "" || n == "none" {
		return "", nil
	}
	if a, ok := aliases[n]; ok {
		n = a
	}
	if !slices.Contains(ToolParsers, n) {
		return "", fmt.Errorf("unknown tool call parser %q (want one of %s)", name, strings.Join(ToolParsers, ", "))
	}
	return n, nil
}

// CanonicalReasoning is CanonicalTool for reasoning parsers.
func CanonicalReasoning(name string) (string, error) {
	n := norm(name)
	if n == "" || n == "none" {
		return "", nil
	}
	if a, ok := reasoningAliases[n]; ok {
		n = a
	}
	if !slices.Contains(ReasoningParsers, n) {
		return "", fmt.Errorf("unknown reasoning parser %q (want one of %s)", name, strings.Join(ReasoningParsers, ", "))
	}
	return n, nil
}

// New returns a Stream for the named parsers.
func New(o Options) (*Stream, error) {
	tn, err := CanonicalTool(o.ToolParser)
	if err != nil {
		return nil, err
	}
	rn, err := CanonicalReasoning(o.ReasoningParser)
	if err != nil {
		return nil, err
	}
	if o.NewID == nil {
		o.NewID = randomID(24)
		if tn == "mistral" {
			o.NewID = func() string { return randomID(9)()[5:] }
		}
	}
	s := &Stream{}
	if o.ForceName != "" || o.ForceList {
		if rn != "" && rn != "gpt_oss" {
			s.r = newReasoner(rn, o.PromptOpensReasoning)
		}
		if o.ForceName != "" {
			s.t = &namedParser{name: o.ForceName, id: o.NewID()}
		} else {
			s.t = &listParser{o: o}
		}
		return s, nil
	}
	if tn == "openai" || rn == "gpt_oss" {
		// Harmony channels carry both reasoning and calls: one parser.
		s.combined = newHarmony(o, tn == "openai", rn == "gpt_oss")
		return s, nil
	}
	if rn != "" {
		s.r = newReasoner(rn, o.PromptOpensReasoning)
	}
	if tn != "" {
		s.t = newToolParser(tn, o)
	}
	return s, nil
}

// randomID returns a maker of "call_" ids with n random letters and digits.
func randomID(n int) func() string {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	return func() string {
		b := make([]byte, n)
		_, _ = rand.Read(b) // crypto/rand.Read never fails
		for i := range b {
			b[i] = alnum[int(b[i])%len(alnum)]
		}
		return "call_" + string(b)
	}
}

// Reasoning reports whether the text fed so far ends inside reasoning (for
// counting reasoning tokens).
func (s *Stream) Reasoning() bool {
	if s.combined != nil {
		return s.combined.(*harmony).inReasoning()
	}
	return s.r != nil && s.r.reasoning()
}

// Feed parses the next text delta and returns what it releases.
func (s *Stream) Feed(text string) Out {
	var out Out
	if s.combined != nil {
		s.combined.feed(text, &out)
		return out
	}
	content := text
	if s.r != nil {
		out.Reasoning, content = s.r.feed(text)
	}
	if s.t != nil {
		s.t.feed(content, &out)
	} else {
		out.Content += content
	}
	return out
}

// Flush ends the reply: held text is released (as content where it turned
// out to be no marker) and an unclosed call at the very end is decoded if it
// can be.
func (s *Stream) Flush() Out {
	var out Out
	if s.combined != nil {
		s.combined.flush(&out)
		return out
	}
	content := ""
	if s.r != nil {
		out.Reasoning, content = s.r.flush()
	}
	if s.t != nil {
		if content != "" {
			s.t.feed(content, &out)
		}
		s.t.flush(&out)
	} else {
		out.Content += content
	}
	return out
}

// Parse parses a whole reply.
func Parse(o Options, text string) (Result, error) {
	s, err := New(o)
	if err != nil {
		return Result{}, err
	}
	var r Result
	r.add(s.Feed(text))
	r.add(s.Flush())
	return r, nil
}

// Collector accumulates a stream's Outs into a Result.
type Collector struct{ Result }

// Add folds one Out into the result.
func (c *Collector) Add(o Out) { c.add(o) }

func (r *Result) add(o Out) {
	r.Reasoning += o.Reasoning
	r.Content += o.Content
	for _, d := range o.Calls {
		for len(r.Calls) <= d.Index {
			r.Calls = append(r.Calls, ToolCall{})
		}
		c := &r.Calls[d.Index]
		if d.ID != "" {
			c.ID = d.ID
		}
		if d.Name != "" {
			c.Name = d.Name
		}
		c.Arguments += d.Arguments
	}
}
