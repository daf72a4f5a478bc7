package chatparse

import (
	"encoding/json"
	"strings"
)

// When a request forces a call (tool_choice "required" or a named
// function) and structured outputs constrain the reply, the model writes
// vLLM's forced shapes instead of its family's: for a named function the
// arguments object alone, for "required" a JSON array of
// {"name": ..., "parameters": {...}} (vLLM's
// get_json_schema_from_tools). Options.ForceName / ForceList select these.

// namedParser streams the whole reply as the named function's arguments.
type namedParser struct {
	name, id string
	started  bool
}

func (p *namedParser) feed(text string, out *Out) {
	if text == "" {
		return
	}
	if !p.started {
		p.started = true
		out.Calls = append(out.Calls, CallDelta{Index: 0, ID: p.id, Name: p.name, Arguments: ""})
	}
	out.Calls = append(out.Calls, CallDelta{Index: 0, Arguments: text})
}

func (p *namedParser) flush(out *Out) {
	if !p.started {
		p.started = true
		out.Calls = append(out.Calls, CallDelta{Index: 0, ID: p.id, Name: p.name}, CallDelta{Index: 0, Arguments: "{}"})
	}
}

// listParser holds the reply and decodes the array at the end; a reply
// that is not such an array is content.
type listParser struct {
	o   Options
	buf strings.Builder
}

// maxForcedList bounds what listParser holds.
const maxForcedList = 1 << 20

func (p *listParser) feed(text string, out *Out) {
	if p.buf.Len()+len(text) > maxForcedList {
		out.Content += p.buf.String() + text
		p.buf.Reset()
		return
	}
	p.buf.WriteString(text)
}

func (p *listParser) flush(out *Out) {
	s := p.buf.String()
	p.buf.Reset()
	var list []json.RawMessage
	if json.Unmarshal([]byte(s), &list) == nil {
		calls := make([]ToolCall, 0, len(list))
		for _, raw := range list {
			c, ok := jsonCall(raw)
			if !ok {
				calls = nil
				break
			}
			calls = append(calls, c)
		}
		if len(calls) > 0 {
			for i, c := range calls {
				out.Calls = append(out.Calls, CallDelta{Index: i, ID: p.o.NewID(), Name: c.Name}, CallDelta{Index: i, Arguments: c.Arguments})
			}
			return
		}
	}
	out.Content += s
}
