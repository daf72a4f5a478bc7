package chatparse

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// pyDumps re-serializes a JSON value as Python's json.dumps(v,
// ensure_ascii=False) writes it (", " and ": " separators, object key
// order kept, non-ASCII text as is), which is what vLLM's parsers put in
// `arguments`. It fails on invalid JSON.
func pyDumps(raw []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b strings.Builder
	if !writeValue(dec, &b, 0) {
		return "", false
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", false
	}
	return b.String(), true
}

// maxDepth bounds nesting, so a hostile reply cannot recurse deeply.
const maxDepth = 64

func writeValue(dec *json.Decoder, b *strings.Builder, depth int) bool {
	if depth > maxDepth {
		return false
	}
	tok, err := dec.Token()
	if err != nil {
		return false
	}
	switch v := tok.(type) {
	case json.Delim:
		closer := json.Delim('}')
		if v == '[' {
			closer = ']'
		}
		b.WriteByte(byte(v))
		first := true
		for dec.More() {
			if !first {
				b.WriteString(", ")
			}
			first = false
			if v == '{' {
				k, err := dec.Token()
				ks, ok := k.(string)
				if err != nil || !ok {
					return false
				}
				writeString(b, ks)
				b.WriteString(": ")
			}
			if !writeValue(dec, b, depth+1) {
				return false
			}
		}
		end, err := dec.Token()
		if err != nil || end != closer {
			return false
		}
		b.WriteByte(byte(closer))
	case string:
		writeString(b, v)
	case json.Number:
		b.WriteString(v.String())
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case nil:
		b.WriteString("null")
	}
	return true
}

// writeString quotes s as Python's json.dumps with ensure_ascii=False.
func writeString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x80 {
			r, n := utf8.DecodeRuneInString(s[i:])
			b.WriteRune(r)
			i += n
			continue
		}
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if c < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte("0123456789abcdef"[c>>4])
				b.WriteByte("0123456789abcdef"[c&15])
			} else {
				b.WriteByte(c)
			}
		}
		i++
	}
	b.WriteByte('"')
}

func quote(s string) string {
	var b strings.Builder
	writeString(&b, s)
	return b.String()
}

// argsText turns a decoded "arguments" (or "parameters") member into the
// arguments string: an object as pyDumps writes it; a string holding JSON
// (some models write the arguments already encoded) as that JSON; absent as
// "{}".
func argsText(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "{}", true
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		if t, ok := pyDumps([]byte(s)); ok {
			return t, true
		}
		return "", false
	}
	if raw[0] != '{' {
		return "", false
	}
	return pyDumps(raw)
}

// rawArgs keeps arguments as the model wrote them (trimmed), when they are
// a JSON object: vLLM's deepseek and kimi_k2 parsers pass the text through
// rather than re-serializing it.
func rawArgs(s string) (string, bool) {
	t := strings.TrimSpace(s)
	if t == "" || t[0] != '{' || !json.Valid([]byte(t)) {
		return "", false
	}
	return t, true
}

// jsonCall decodes {"name": ..., "arguments"|"parameters": {...}}.
func jsonCall(raw []byte) (ToolCall, bool) {
	var c struct {
		Name       *string         `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if dec.Decode(&c) != nil || c.Name == nil || *c.Name == "" {
		return ToolCall{}, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return ToolCall{}, false
	}
	args := c.Arguments
	if args == nil {
		args = c.Parameters
	}
	a, ok := argsText(args)
	if !ok {
		return ToolCall{}, false
	}
	return ToolCall{Name: *c.Name, Arguments: a}, true
}

// decodeHermes: <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
// (Hermes 2 Pro, Qwen2.5, Qwen3; vLLM's hermes parser).
func decodeHermes(_ *sectionParser, _, body string) ([]ToolCall, bool) {
	c, ok := jsonCall([]byte(strings.TrimSpace(body)))
	if !ok {
		return nil, false
	}
	return []ToolCall{c}, true
}

// decodeLlama3: {"name": "f", "parameters": {...}}, several joined by "; ",
// optionally after <|python_tag|> (Llama 3.1/3.2 JSON tool calling; vLLM's
// llama3_json parser).
func decodeLlama3(_ *sectionParser, start, body string) ([]ToolCall, bool) {
	text := body
	if start == "{" {
		text = "{" + body
	}
	text = strings.TrimSpace(text)
	var calls []ToolCall
	dec := json.NewDecoder(strings.NewReader(text))
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		c, ok := jsonCall(raw)
		if !ok {
			return nil, false
		}
		calls = append(calls, c)
		rest := strings.TrimSpace(text[dec.InputOffset():])
		if rest == "" {
			return calls, true
		}
		if rest[0] != ';' {
			return nil, false
		}
		text = strings.TrimSpace(rest[1:])
		if text == "" {
			return calls, true
		}
		dec = json.NewDecoder(strings.NewReader(text))
	}
}

// decodeMistral: [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
// (tokenizer v3..v7), or [TOOL_CALLS]f[ARGS]{...} repeated (v11+, where
// each call has its own [TOOL_CALLS]); vLLM's mistral parser.
func decodeMistral(_ *sectionParser, _, body string) ([]ToolCall, bool) {
	body = strings.TrimSpace(body)
	if strings.HasPrefix(body, "[") {
		var list []json.RawMessage
		if json.Unmarshal([]byte(body), &list) != nil {
			return nil, false
		}
		calls := make([]ToolCall, 0, len(list))
		for _, raw := range list {
			c, ok := jsonCall(raw)
			if !ok {
				return nil, false
			}
			calls = append(calls, c)
		}
		return calls, true
	}
	var calls []ToolCall
	for _, part := range strings.Split(body, "[TOOL_CALLS]") {
		name, args, ok := strings.Cut(part, "[ARGS]")
		if !ok {
			return nil, false
		}
		name, _, _ = strings.Cut(name, "[CALL_ID]")
		name = strings.TrimSpace(name)
		a, ok := argsText(json.RawMessage(strings.TrimSpace(args)))
		if !ok || name == "" {
			return nil, false
		}
		calls = append(calls, ToolCall{Name: name, Arguments: a})
	}
	return calls, true
}

// DeepSeek's markers use fullwidth bars (U+FF5C) and U+2581 for spaces.
const (
	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"
)

// decodeDeepSeek reads both DeepSeek forms:
//
//	V3 / R1:  <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
//	V3.1:     <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>
//
// (vLLM's deepseek_v3 and deepseek_v31 parsers).
func decodeDeepSeek(_ *sectionParser, _, body string) ([]ToolCall, bool) {
	var calls []ToolCall
	rest := body
	for {
		i := strings.Index(rest, dsCallBegin)
		if i < 0 {
			break
		}
		if strings.TrimSpace(rest[:i]) != "" {
			return nil, false
		}
		rest = rest[i+len(dsCallBegin):]
		inner, after, ok := strings.Cut(rest, dsCallEnd)
		if !ok {
			inner, after = rest, "" // cut short: vLLM's regex needs the end; try anyway
		}
		rest = after
		left, right, ok := strings.Cut(inner, dsSep)
		if !ok {
			return nil, false
		}
		var name, args string
		if nm, a, ok := strings.Cut(right, "\n```json\n"); ok {
			name, args = nm, strings.TrimSuffix(strings.TrimRight(a, " \n"), "```")
		} else {
			name, args = left, right
		}
		a, ok := rawArgs(args)
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, false
		}
		calls = append(calls, ToolCall{Name: name, Arguments: a})
	}
	if strings.TrimSpace(rest) != "" {
		return nil, false
	}
	return calls, len(calls) > 0
}

const (
	kimiSectionBegin = "<|tool_calls_section_begin|>"
	kimiSectionEnd   = "<|tool_calls_section_end|>"
	kimiCallBegin    = "<|tool_call_begin|>"
	kimiArgBegin     = "<|tool_call_argument_begin|>"
	kimiCallEnd      = "<|tool_call_end|>"
)

// decodeKimi: <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>ARGS<|tool_call_end|>
// (Kimi K2's tool-call guide; vLLM's kimi_k2 parser, which keeps
// "functions.NAME:IDX" as the call id).
func decodeKimi(_ *sectionParser, _, body string) ([]ToolCall, bool) {
	var calls []ToolCall
	rest := body
	for {
		i := strings.Index(rest, kimiCallBegin)
		if i < 0 {
			break
		}
		if strings.TrimSpace(rest[:i]) != "" {
			return nil, false
		}
		rest = rest[i+len(kimiCallBegin):]
		inner, after, ok := strings.Cut(rest, kimiCallEnd)
		if !ok {
			inner, after = rest, ""
		}
		rest = after
		id, args, ok := strings.Cut(inner, kimiArgBegin)
		if !ok {
			return nil, false
		}
		id = strings.TrimSpace(id)
		name := id
		if _, n, ok := strings.Cut(name, "."); ok {
			name = n
		}
		if j := strings.LastIndexByte(name, ':'); j >= 0 {
			name = name[:j]
		}
		a, ok := rawArgs(args)
		if !ok || name == "" {
			return nil, false
		}
		calls = append(calls, ToolCall{ID: id, Name: name, Arguments: a})
	}
	if strings.TrimSpace(rest) != "" {
		return nil, false
	}
	return calls, len(calls) > 0
}

// decodeQwen3Coder: <tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call>
// (Qwen3-Coder's chat template; vLLM's qwen3_coder parser: one newline is
// trimmed on each side of a value, and values are converted by the
// parameter's schema type).
func decodeQwen3Coder(p *sectionParser, _, body string) ([]ToolCall, bool) {
	var calls []ToolCall
	rest := strings.TrimSpace(body)
	for rest != "" {
		if !strings.HasPrefix(rest, "<function=") {
			return nil, false
		}
		rest = rest[len("<function="):]
		head, fbody, ok := strings.Cut(rest, ">")
		if !ok {
			return nil, false
		}
		name := strings.TrimSpace(head)
		fbody, after, ok := strings.Cut(fbody, "</function>")
		if !ok {
			after = "" // cut short at the end of the section
		}
		rest = strings.TrimSpace(after)
		var b strings.Builder
		b.WriteByte('{')
		n := 0
		ps := strings.TrimSpace(fbody)
		for ps != "" {
			if !strings.HasPrefix(ps, "<parameter=") {
				return nil, false
			}
			ps = ps[len("<parameter="):]
			k, v, ok := strings.Cut(ps, ">")
			if !ok {
				return nil, false
			}
			v, after, ok := strings.Cut(v, "</parameter>")
			if !ok {
				// vLLM also ends a value at the next parameter or the
				// function's end.
				if j := strings.Index(v, "<parameter="); j >= 0 {
					v, after = v[:j], v[j:]
				} else {
					after = ""
				}
			}
			ps = strings.TrimSpace(after)
			v = strings.TrimPrefix(v, "\n")
			v = strings.TrimSuffix(v, "\n")
			if n > 0 {
				b.WriteString(", ")
			}
			n++
			k = strings.TrimSpace(k)
			writeString(&b, k)
			b.WriteString(": ")
			b.WriteString(p.convert(name, k, v))
		}
		b.WriteByte('}')
		if name == "" {
			return nil, false
		}
		calls = append(calls, ToolCall{Name: name, Arguments: b.String()})
	}
	return calls, len(calls) > 0
}

// decodeGLM45: <tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n...</tool_call>
// (GLM-4.5's chat template; vLLM's glm45 parser: values are text unless
// the schema types them).
func decodeGLM45(p *sectionParser, _, body string) ([]ToolCall, bool) {
	name, rest, _ := strings.Cut(body, "<arg_key>")
	name = strings.TrimSpace(name)
	if name == "" || strings.ContainsAny(name, "<>\n") {
		return nil, false
	}
	var b strings.Builder
	b.WriteByte('{')
	n := 0
	if rest != "" || strings.Contains(body, "<arg_key>") {
		rest = "<arg_key>" + rest
	}
	for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimSpace(rest) {
		if !strings.HasPrefix(rest, "<arg_key>") {
			return nil, false
		}
		k, after, ok := strings.Cut(rest[len("<arg_key>"):], "</arg_key>")
		if !ok {
			return nil, false
		}
		after = strings.TrimSpace(after)
		if !strings.HasPrefix(after, "<arg_value>") {
			return nil, false
		}
		v, after, ok := strings.Cut(after[len("<arg_value>"):], "</arg_value>")
		if !ok {
			return nil, false
		}
		rest = after
		if n > 0 {
			b.WriteString(", ")
		}
		n++
		k = strings.TrimSpace(k)
		writeString(&b, k)
		b.WriteString(": ")
		b.WriteString(p.convert(name, k, v))
	}
	b.WriteByte('}')
	return []ToolCall{{Name: name, Arguments: b.String()}}, true
}

// convert turns a parameter written as text into its JSON, by the tool's
// schema type (vLLM's qwen3_coder and glm45 rules): strings stay strings;
// integers, numbers and booleans are parsed (text again if they do not
// parse); objects and arrays are JSON if they parse; "null" is null; a
// parameter the schema does not know is text.
func (p *sectionParser) convert(fn, key, v string) string {
	typ := ""
	if t := p.tool(fn); t != nil {
		typ = t.Params[key]
	}
	if strings.EqualFold(strings.TrimSpace(v), "null") && typ != "string" {
		return "null"
	}
	switch typ {
	case "integer", "int":
		if _, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			return strings.TrimSpace(v)
		}
	case "number", "float":
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			if out, ok := pyDumps([]byte(strings.TrimSpace(v))); ok {
				return out
			}
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
	case "boolean", "bool":
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true":
			return "true"
		case "false":
			return "false"
		}
	case "object", "array":
		if out, ok := pyDumps([]byte(v)); ok {
			return out
		}
	}
	return quote(v)
}
