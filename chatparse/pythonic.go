package chatparse

import (
	"strconv"
	"strings"
)

// decodePythonic: [get_weather(city="Paris"), get_time()] — a Python list
// of calls with literal keyword arguments (Llama 3.2 / Llama 4 pythonic
// tool calling, optionally inside <|python_start|>…<|python_end|>; vLLM's
// pythonic parser, which reads it with Python's ast and so accepts only
// literals).
func decodePythonic(_ *sectionParser, start, body string) ([]ToolCall, bool) {
	text := body
	if start == "[" {
		text = "[" + body
	}
	text = strings.TrimSpace(text)
	text = strings.TrimSpace(strings.TrimSuffix(text, "<|python_end|>"))
	y := pyParser{s: text}
	calls, ok := y.calls()
	if !ok {
		return nil, false
	}
	y.space()
	if y.i != len(y.s) {
		return nil, false
	}
	return calls, len(calls) > 0
}

type pyParser struct {
	s     string
	i     int
	depth int
}

func (y *pyParser) space() {
	for y.i < len(y.s) && strings.IndexByte(" \t\r\n", y.s[y.i]) >= 0 {
		y.i++
	}
}

func (y *pyParser) eat(c byte) bool {
	y.space()
	if y.i < len(y.s) && y.s[y.i] == c {
		y.i++
		return true
	}
	return false
}

func (y *pyParser) ident() string {
	y.space()
	j := y.i
	for y.i < len(y.s) {
		c := y.s[y.i]
		if c == '_' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || y.i > j && c >= '0' && c <= '9' {
			y.i++
			continue
		}
		break
	}
	return y.s[j:y.i]
}

func (y *pyParser) calls() ([]ToolCall, bool) {
	if !y.eat('[') {
		return nil, false
	}
	var calls []ToolCall
	for !y.eat(']') {
		if len(calls) > 0 && !y.eat(',') {
			return nil, false
		}
		if y.eat(']') { // trailing comma
			break
		}
		name := y.ident()
		if name == "" || !y.eat('(') {
			return nil, false
		}
		var b strings.Builder
		b.WriteByte('{')
		n := 0
		for !y.eat(')') {
			if n > 0 && !y.eat(',') {
				return nil, false
			}
			if y.eat(')') {
				break
			}
			k := y.ident()
			if k == "" || !y.eat('=') {
				return nil, false
			}
			if n > 0 {
				b.WriteString(", ")
			}
			n++
			writeString(&b, k)
			b.WriteString(": ")
			if !y.value(&b) {
				return nil, false
			}
		}
		b.WriteByte('}')
		calls = append(calls, ToolCall{Name: name, Arguments: b.String()})
	}
	return calls, true
}

// value writes one Python literal as JSON.
func (y *pyParser) value(b *strings.Builder) bool {
	if y.depth++; y.depth > maxDepth {
		return false
	}
	defer func() { y.depth-- }()
	y.space()
	if y.i >= len(y.s) {
		return false
	}
	switch c := y.s[y.i]; {
	case c == '"' || c == '\'':
		s, ok := y.str()
		if !ok {
			return false
		}
		writeString(b, s)
	case c == '[' || c == '(':
		closer := byte(']')
		if c == '(' {
			closer = ')'
		}
		y.i++
		b.WriteByte('[')
		for n := 0; !y.eat(closer); n++ {
			if n > 0 {
				if !y.eat(',') {
					return false
				}
				if y.eat(closer) {
					break
				}
				b.WriteString(", ")
			}
			if !y.value(b) {
				return false
			}
		}
		b.WriteByte(']')
	case c == '{':
		y.i++
		b.WriteByte('{')
		for n := 0; !y.eat('}'); n++ {
			if n > 0 {
				if !y.eat(',') {
					return false
				}
				if y.eat('}') {
					break
				}
				b.WriteString(", ")
			}
			y.space()
			if y.i >= len(y.s) || y.s[y.i] != '"' && y.s[y.i] != '\'' {
				return false
			}
			k, ok := y.str()
			if !ok || !y.eat(':') {
				return false
			}
			writeString(b, k)
			b.WriteString(": ")
			if !y.value(b) {
				return false
			}
		}
		b.WriteByte('}')
	default:
		w := y.ident()
		switch w {
		case "True":
			b.WriteString("true")
		case "False":
			b.WriteString("false")
		case "None":
			b.WriteString("null")
		case "":
			j := y.i
			for y.i < len(y.s) && strings.IndexByte("+-0123456789.eE", y.s[y.i]) >= 0 {
				y.i++
			}
			num := y.s[j:y.i]
			if _, err := strconv.ParseFloat(num, 64); err != nil || num == "" {
				return false
			}
			if out, ok := pyDumps([]byte(strings.TrimPrefix(num, "+"))); ok {
				b.WriteString(out)
			} else {
				// 1. or .5: valid Python, not JSON.
				f, _ := strconv.ParseFloat(num, 64)
				b.WriteString(strconv.FormatFloat(f, 'f', -1, 64))
			}
		default:
			return false
		}
	}
	return true
}

// str reads a Python string literal (single or double quotes, the common
// escapes).
func (y *pyParser) str() (string, bool) {
	q := y.s[y.i]
	y.i++
	var b strings.Builder
	for y.i < len(y.s) {
		c := y.s[y.i]
		y.i++
		switch {
		case c == q:
			return b.String(), true
		case c == '\\' && y.i < len(y.s):
			e := y.s[y.i]
			y.i++
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '0':
				b.WriteByte(0)
			default:
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", false
}
