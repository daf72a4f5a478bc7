package chatparse

import "strings"

// tagReasoner splits one reasoning block, opened by one of starts at the
// beginning of the reply (or by the prompt) and closed by one of ends, from
// the content that follows. Only the first block is reasoning, as in
// vLLM's parsers; later tags are content.
type tagReasoner struct {
	starts, ends []string
	// opens end the reasoning too but belong to the content that follows
	// (Qwen3's <tool_call> written without closing </think>).
	opens []string
	// dflt: a reply that does not open with a start tag is reasoning
	// anyway until an end tag (DeepSeek-R1, whose template opens the
	// block in the prompt).
	dflt  bool
	state int // rBegin, rIn, rDone
	held  string
}

const (
	rBegin = iota
	rIn
	rDone
)

func newReasoner(name string, promptOpens bool) reasoner {
	r := &tagReasoner{starts: []string{"<think>"}, ends: []string{"</think>"}}
	switch name {
	case "qwen3":
		// vLLM's Qwen3ReasoningParser: a <tool_call> ends the reasoning
		// even without </think>.
		r.opens = []string{"<tool_call>"}
	case "deepseek_r1":
		// vLLM's DeepSeekR1ReasoningParser: text before </think> is
		// reasoning whether or not <think> was written (the template
		// writes it in the prompt).
		r.dflt = true
	case "granite":
		// vLLM's GraniteReasoningParser: Granite 3.2's two phrases.
		r.starts = []string{"Here is my thought process:", "Here's my thought process:"}
		r.ends = []string{"Here is my response:", "Here's my response:"}
	case "kimi":
		// Kimi-K2-Thinking writes <think>; Kimi-VL-Thinking ◁think▷.
		r.starts = append(r.starts, "◁think▷")
		r.ends = append(r.ends, "◁/think▷")
	}
	if promptOpens {
		r.dflt = true
	}
	return r
}

func (r *tagReasoner) reasoning() bool { return r.state == rIn || r.state == rBegin && r.dflt }

func (r *tagReasoner) feed(text string) (reasoning, content string) {
	if r.state == rDone {
		return "", text
	}
	text = r.held + text
	r.held = ""
	if r.state == rBegin {
		lead := len(text) - len(strings.TrimLeft(text, " \t\r\n"))
		rest := text[lead:]
		if rest == "" {
			r.held = text
			return "", ""
		}
		for _, s := range r.starts {
			if strings.HasPrefix(rest, s) {
				r.state = rIn
				text = rest[len(s):]
				goto in
			}
			if strings.HasPrefix(s, rest) {
				r.held = text
				return "", ""
			}
		}
		if !r.dflt {
			r.state = rDone
			return "", text
		}
		r.state = rIn
	}
in:
	i, n := firstOf(text, r.ends)
	if j, _ := firstOf(text, r.opens); j >= 0 && (i < 0 || j < i) {
		r.state = rDone
		return text[:j], text[j:]
	}
	if i >= 0 {
		r.state = rDone
		return text[:i], text[i+n:]
	}
	keep := max(partialSuffix(text, r.ends), partialSuffix(text, r.opens))
	r.held = text[len(text)-keep:]
	return text[:len(text)-keep], ""
}

func (r *tagReasoner) flush() (reasoning, content string) {
	h := r.held
	r.held = ""
	if r.state == rIn || r.state == rBegin && r.dflt {
		return h, ""
	}
	return "", h
}

// firstOf returns the earliest index in s of any of markers and that
// marker's length, or -1.
func firstOf(s string, markers []string) (int, int) {
	best, n := -1, 0
	for _, m := range markers {
		if i := strings.Index(s, m); i >= 0 && (best < 0 || i < best) {
			best, n = i, len(m)
		}
	}
	return best, n
}

// partialSuffix is the length of the longest suffix of s that is a proper
// prefix of one of markers: what a stream must hold back.
func partialSuffix(s string, markers []string) int {
	best := 0
	for _, m := range markers {
		for k := min(len(m)-1, len(s)); k > best; k-- {
			if strings.HasSuffix(s, m[:k]) {
				best = k
				break
			}
		}
	}
	return best
}
