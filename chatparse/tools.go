package chatparse

import (
	"strings"
)

// family describes a tool-call format as sections of text: a section opens
// with one of starts and runs to end (or, with end "", to the end of the
// reply); decode turns its body into calls, or fails, and the section is
// then content.
type family struct {
	starts []string
	end    string
	// atStart: a section may only open the reply (after white space), as
	// llama3_json's bare JSON and pythonic lists do.
	atStart bool
	decode  func(p *sectionParser, start, body string) ([]ToolCall, bool)
}

func newToolParser(name string, o Options) toolParser {
	var f family
	switch name {
	case "hermes":
		f = family{starts: []string{"<tool_call>"}, end: "</tool_call>", decode: decodeHermes}
	case "qwen3_coder":
		f = family{starts: []string{"<tool_call>"}, end: "</tool_call>", decode: decodeQwen3Coder}
	case "glm45":
		f = family{starts: []string{"<tool_call>"}, end: "</tool_call>", decode: decodeGLM45}
	case "llama3_json":
		f = family{starts: []string{"<|python_tag|>", "{"}, atStart: true, decode: decodeLlama3}
	case "pythonic":
		f = family{starts: []string{"<|python_start|>", "["}, atStart: true, decode: decodePythonic}
	case "mistral":
		f = family{starts: []string{"[TOOL_CALLS]"}, decode: decodeMistral}
	case "deepseek_v3", "deepseek_v31":
		f = family{starts: []string{dsCallsBegin}, end: dsCallsEnd, decode: decodeDeepSeek}
	case "kimi_k2":
		f = family{starts: []string{kimiSectionBegin, "<|tool_call_section_begin|>"}, end: kimiSectionEnd, decode: decodeKimi}
	}
	return &sectionParser{f: f, o: o, tools: o.Tools}
}

const fence = "```"

// sectionParser streams a family's sections: content outside them,
// calls for the ones that decode, the raw text for the ones that do not.
type sectionParser struct {
	f     family
	o     Options
	tools []Tool
	held  string // text not released yet: a partial marker, or a section
	in    bool   // held holds an open section (from its start marker)
	start string // the open section's start marker
	// fenced: the content so far has an odd number of ``` fences, so we
	// are inside a code block where markers are text.
	fenced bool
	begun  bool // atStart families: the reply's first non-space text is past
	calls  int
	// space is white space after a call, held until text follows (then
	// content) or the reply ends (then dropped, as vLLM drops it).
	space string
}

func (p *sectionParser) feed(text string, out *Out) {
	s := p.held + text
	p.held = ""
	for s != "" {
		if p.in {
			if p.f.end == "" {
				p.held = s
				return
			}
			i := strings.Index(s, p.f.end)
			if i < 0 {
				p.held = s
				return
			}
			p.close(s[:i], p.f.end, out)
			s = s[i+len(p.f.end):]
			continue
		}
		if p.f.atStart {
			if p.begun {
				p.content(s, out)
				return
			}
			rest := strings.TrimLeft(s, " \t\r\n")
			if rest == "" {
				p.held = s
				return
			}
			for _, m := range p.f.starts {
				if strings.HasPrefix(rest, m) {
					p.begun, p.in, p.start = true, true, m
					p.held = rest[len(m):]
					return
				}
				if strings.HasPrefix(m, rest) {
					p.held = s
					return
				}
			}
			p.begun = true
			p.content(s, out)
			return
		}
		// Content: the earliest start marker or fence.
		i, n := firstOf(s, p.f.starts)
		j := strings.Index(s, fence)
		if j >= 0 && (i < 0 || j < i || p.fenced) {
			p.content(s[:j+len(fence)], out)
			p.fenced = !p.fenced
			s = s[j+len(fence):]
			continue
		}
		if i >= 0 && !p.fenced {
			p.content(s[:i], out)
			p.in, p.start = true, s[i:i+n]
			s = s[i+n:]
			continue
		}
		// No marker: hold what may begin one.
		keep := partialSuffix(s, append(p.f.starts[:len(p.f.starts):len(p.f.starts)], fence))
		if p.fenced {
			keep = partialSuffix(s, []string{fence})
		}
		p.content(s[:len(s)-keep], out)
		p.held = s[len(s)-keep:]
		return
	}
}

// content releases text, holding white space that follows a call.
func (p *sectionParser) content(s string, out *Out) {
	if s == "" {
		return
	}
	if p.calls > 0 && strings.TrimSpace(p.space+s) == "" {
		p.space += s
		return
	}
	out.Content += p.space + s
	p.space = ""
}

// close decodes one section's body: calls, or its text as content.
func (p *sectionParser) close(body, end string, out *Out) {
	p.in = false
	calls, ok := p.f.decode(p, p.start, body)
	if !ok || len(calls) == 0 {
		p.content(p.start+body+end, out)
		return
	}
	p.space = ""
	for _, c := range calls {
		id := c.ID
		if id == "" {
			id = p.o.NewID()
		}
		out.Calls = append(out.Calls, CallDelta{Index: p.calls, ID: id, Name: c.Name}, CallDelta{Index: p.calls, Arguments: c.Arguments})
		p.calls++
	}
}

func (p *sectionParser) flush(out *Out) {
	s := p.held
	p.held = ""
	if p.in {
		// The reply ended inside a section (no end marker, or max_tokens
		// cut it): decode what is there, as vLLM's regexes do.
		p.close(s, "", out)
	} else if s != "" {
		p.content(s, out)
	}
	p.space = ""
}

// tool returns the request's tool of that name, if any.
func (p *sectionParser) tool(name string) *Tool {
	for i := range p.tools {
		if p.tools[i].Name == name {
			return &p.tools[i]
		}
	}
	return nil
}
