package chatparse

import "strings"

// Harmony (gpt-oss): the reply is a series of messages
//
//	<|channel|>analysis<|message|>…<|end|>
//	<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>
//	<|start|>assistant<|channel|>final<|message|>…<|return|>
//
// (OpenAI's harmony response format guide; the recipient may also stand in
// the role part: "<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>").
// analysis is reasoning, final is content, a commentary message to
// functions.NAME is a call whose arguments are its text (streamed as it
// comes), and a commentary message to no one (a preamble) is content, as
// vLLM's harmony handling does.
const (
	hStart   = "<|start|>"
	hChannel = "<|channel|>"
	hMessage = "<|message|>"
)

var hEnds = []string{"<|end|>", "<|call|>", "<|return|>"}

// maxHeader bounds a message header; a longer one is not harmony.
const maxHeader = 512

type harmony struct {
	o             Options
	tools, reason bool
	held          string
	inBody        bool
	plain         bool // the reply is not harmony: all content
	kind          int  // the current body's destination
	calls         int
}

const (
	hContent = iota
	hReasoning
	hCall
)

func newHarmony(o Options, tools, reason bool) *harmony {
	return &harmony{o: o, tools: tools, reason: reason}
}

func (h *harmony) inReasoning() bool { return h.inBody && h.kind == hReasoning }

func (h *harmony) feed(text string, out *Out) {
	s := h.held + text
	h.held = ""
	for s != "" {
		if h.plain {
			out.Content += s
			return
		}
		if !h.inBody {
			// A header starts with a harmony token; anything else, or a
			// header too long to be one, means the reply is plain text.
			if t := strings.TrimLeft(s, " \t\r\n"); t != "" && !strings.HasPrefix(t, "<|") && !strings.HasPrefix("<|", t) {
				h.plain = true
				continue
			}
			i := strings.Index(s, hMessage)
			if i > maxHeader || i < 0 && len(s) > maxHeader {
				h.plain = true
				continue
			}
			if i < 0 {
				h.held = s
				return
			}
			h.header(s[:i], out)
			s = s[i+len(hMessage):]
			h.inBody = true
			continue
		}
		i, n := firstOf(s, hEnds)
		if i >= 0 {
			h.body(s[:i], out)
			s = s[i+n:]
			h.inBody = false
			continue
		}
		keep := partialSuffix(s, hEnds)
		h.body(s[:len(s)-keep], out)
		h.held = s[len(s)-keep:]
		return
	}
}

// header reads "<|start|>assistant to=X<|channel|>commentary to=X <|constrain|>json".
func (h *harmony) header(hd string, out *Out) {
	channel, recipient := "", ""
	if _, after, ok := strings.Cut(hd, hChannel); ok {
		channel = after
		if j := strings.IndexAny(channel, " <"); j >= 0 {
			channel = channel[:j]
		}
	}
	if _, after, ok := strings.Cut(hd, "to="); ok {
		recipient = after
		if j := strings.IndexAny(recipient, " <"); j >= 0 {
			recipient = recipient[:j]
		}
	}
	switch {
	case strings.HasPrefix(recipient, "functions.") && len(recipient) > len("functions.") && h.tools:
		h.kind = hCall
		out.Calls = append(out.Calls, CallDelta{Index: h.calls, ID: h.o.NewID(), Name: strings.TrimPrefix(recipient, "functions.")})
		h.calls++
	case channel == "analysis" && h.reason:
		h.kind = hReasoning
	default:
		h.kind = hContent
	}
}

func (h *harmony) body(s string, out *Out) {
	if s == "" {
		return
	}
	switch h.kind {
	case hCall:
		out.Calls = append(out.Calls, CallDelta{Index: h.calls - 1, Arguments: s})
	case hReasoning:
		out.Reasoning += s
	default:
		out.Content += s
	}
}

func (h *harmony) flush(out *Out) {
	s := h.held
	h.held = ""
	if h.inBody {
		h.body(s, out)
		return
	}
	if strings.TrimSpace(s) != "" {
		out.Content += s
	}
}
