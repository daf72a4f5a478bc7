package structured

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxGrammarSource bounds a GBNF grammar's text.
const maxGrammarSource = 1 << 20

// CompileGBNF compiles a llama.cpp GBNF grammar (rules `name ::= ...`,
// "literals", [classes], [^negated], ., ( ), * + ? {m,n}, # comments;
// the start rule is root). Left-recursive rules are refused.
func CompileGBNF(src string) (*Grammar, error) {
	if len(src) > maxGrammarSource {
		return nil, fmt.Errorf("structured: grammar of %d bytes (limit %d)", len(src), maxGrammarSource)
	}
	b := newBuilder()
	p := &gbnfParser{src: src, b: b, rules: map[string]int32{"root": 0}, defined: map[string]bool{}, rc: &reCompiler{b: b}}
	if err := p.parse(); err != nil {
		return nil, fmt.Errorf("structured: grammar: %w", err)
	}
	return b.finish()
}

type gbnfParser struct {
	src     string
	pos     int
	b       *builder
	rules   map[string]int32
	defined map[string]bool
	rc      *reCompiler
}

func (p *gbnfParser) errf(format string, a ...any) error {
	line := strings.Count(p.src[:p.pos], "\n") + 1
	return fmt.Errorf("line %d: %s", line, fmt.Sprintf(format, a...))
}

// skip skips spaces and comments, and newlines when nl.
func (p *gbnfParser) skip(nl bool) {
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == ' ' || c == '\t' || c == '\r':
			p.pos++
		case c == '\n' && nl:
			p.pos++
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		default:
			return
		}
	}
}

func isNameByte(c byte) bool {
	return c == '-' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func (p *gbnfParser) name() string {
	s := p.pos
	for p.pos < len(p.src) && isNameByte(p.src[p.pos]) {
		p.pos++
	}
	return p.src[s:p.pos]
}

func (p *gbnfParser) rule(name string) int32 {
	if r, ok := p.rules[name]; ok {
		return r
	}
	r := p.b.newRule(name)
	p.rules[name] = r
	return r
}

func (p *gbnfParser) parse() error {
	for {
		p.skip(true)
		if p.pos >= len(p.src) {
			break
		}
		name := p.name()
		if name == "" {
			return p.errf("expected a rule name")
		}
		p.skip(false)
		if !strings.HasPrefix(p.src[p.pos:], "::=") {
			return p.errf("expected ::= after %q", name)
		}
		p.pos += 3
		if p.defined[name] {
			return p.errf("rule %q defined twice", name)
		}
		p.defined[name] = true
		r := p.rule(name)
		if err := p.alternates(r, false); err != nil {
			return err
		}
		if p.b.err != nil {
			return p.b.err
		}
	}
	for name := range p.rules {
		if !p.defined[name] {
			return fmt.Errorf("rule %q is used but not defined", name)
		}
	}
	return nil
}

// alternates parses seq ("|" seq)* into rule r.
func (p *gbnfParser) alternates(r int32, nested bool) error {
	for {
		seq, err := p.sequence(nested)
		if err != nil {
			return err
		}
		p.b.alt(r, seq...)
		p.skip(nested)
		if p.pos < len(p.src) && p.src[p.pos] == '|' {
			p.pos++
			p.skip(true)
			continue
		}
		if !nested && p.pos < len(p.src) && p.src[p.pos] == '\n' {
			// A rule may continue on the next line with "|".
			save := p.pos
			p.skip(true)
			if p.pos < len(p.src) && p.src[p.pos] == '|' {
				p.pos++
				p.skip(true)
				continue
			}
			p.pos = save
		}
		return nil
	}
}

func (p *gbnfParser) sequence(nested bool) ([]elem, error) {
	var out []elem
	for {
		p.skip(nested)
		if p.pos >= len(p.src) {
			return out, nil
		}
		c := p.src[p.pos]
		var item []elem
		switch {
		case c == '"':
			p.pos++
			var s strings.Builder
			for {
				if p.pos >= len(p.src) {
					return nil, p.errf("unterminated literal")
				}
				if p.src[p.pos] == '"' {
					p.pos++
					break
				}
				r, err := p.char()
				if err != nil {
					return nil, err
				}
				s.WriteRune(r)
			}
			item = lit(s.String())
			if len(item) == 0 {
				item = []elem{}
			}
		case c == '[':
			p.pos++
			neg := false
			if p.pos < len(p.src) && p.src[p.pos] == '^' {
				neg = true
				p.pos++
			}
			var ranges []rune
			for {
				if p.pos >= len(p.src) {
					return nil, p.errf("unterminated character class")
				}
				if p.src[p.pos] == ']' {
					p.pos++
					break
				}
				lo, err := p.char()
				if err != nil {
					return nil, err
				}
				hi := lo
				if p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
					p.pos++
					if hi, err = p.char(); err != nil {
						return nil, err
					}
				}
				ranges = append(ranges, lo, hi)
			}
			if neg {
				ranges = negate(ranges)
			}
			item = []elem{ref(p.rc.class(ranges))}
		case c == '.':
			p.pos++
			item = []elem{ref(p.rc.class([]rune{0, unicode.MaxRune}))}
		case c == '(':
			p.pos++
			r := p.b.newRule("group")
			if err := p.alternates(r, true); err != nil {
				return nil, err
			}
			p.skip(true)
			if p.pos >= len(p.src) || p.src[p.pos] != ')' {
				return nil, p.errf("expected )")
			}
			p.pos++
			item = []elem{ref(r)}
		case isNameByte(c):
			save := p.pos
			name := p.name()
			// The next rule's "name ::=" ends this sequence.
			q := p.pos
			for q < len(p.src) && (p.src[q] == ' ' || p.src[q] == '\t') {
				q++
			}
			if strings.HasPrefix(p.src[q:], "::=") {
				p.pos = save
				return out, nil
			}
			item = []elem{ref(p.rule(name))}
		default:
			return out, nil
		}
		// Postfix operators.
		p.skip(false)
		if p.pos < len(p.src) {
			switch p.src[p.pos] {
			case '*', '+', '?':
				op := p.src[p.pos]
				p.pos++
				min, max := 0, -1
				if op == '+' {
					min = 1
				} else if op == '?' {
					max = 1
				}
				item = []elem{ref(p.b.repeat(min, max, item...))}
			case '{':
				end := strings.IndexByte(p.src[p.pos:], '}')
				if end < 0 {
					return nil, p.errf("unterminated {m,n}")
				}
				spec := p.src[p.pos+1 : p.pos+end]
				p.pos += end + 1
				min, max, err := parseRepeat(spec)
				if err != nil {
					return nil, p.errf("%v", err)
				}
				item = []elem{ref(p.b.repeat(min, max, item...))}
			}
		}
		out = append(out, item...)
	}
}

func parseRepeat(spec string) (int, int, error) {
	lo, hi, comma := strings.Cut(strings.TrimSpace(spec), ",")
	min, err := strconv.Atoi(strings.TrimSpace(lo))
	if err != nil || min < 0 {
		return 0, 0, fmt.Errorf("bad repetition {%s}", spec)
	}
	if !comma {
		return min, min, nil
	}
	hi = strings.TrimSpace(hi)
	if hi == "" {
		return min, -1, nil
	}
	max, err := strconv.Atoi(hi)
	if err != nil || max < min {
		return 0, 0, fmt.Errorf("bad repetition {%s}", spec)
	}
	return min, max, nil
}

// char reads one (possibly escaped) character of a literal or class.
func (p *gbnfParser) char() (rune, error) {
	c := p.src[p.pos]
	if c != '\\' {
		r, n := utf8.DecodeRuneInString(p.src[p.pos:])
		p.pos += n
		return r, nil
	}
	if p.pos+1 >= len(p.src) {
		return 0, p.errf("dangling escape")
	}
	e := p.src[p.pos+1]
	p.pos += 2
	hex := func(n int) (rune, error) {
		if p.pos+n > len(p.src) {
			return 0, p.errf("short escape")
		}
		v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
		if err != nil || v > unicode.MaxRune {
			return 0, p.errf("bad escape")
		}
		p.pos += n
		return rune(v), nil
	}
	switch e {
	case 'n':
		return '\n', nil
	case 't':
		return '\t', nil
	case 'r':
		return '\r', nil
	case 'x':
		return hex(2)
	case 'u':
		return hex(4)
	case 'U':
		return hex(8)
	}
	return rune(e), nil
}

// negate is the complement of rune ranges within [0, MaxRune].
func negate(ranges []rune) []rune {
	// sort pairs
	type pr struct{ lo, hi rune }
	ps := make([]pr, 0, len(ranges)/2)
	for i := 0; i+1 < len(ranges); i += 2 {
		ps = append(ps, pr{ranges[i], ranges[i+1]})
	}
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].lo < ps[j-1].lo; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
	var out []rune
	next := rune(0)
	for _, x := range ps {
		if x.lo > next {
			out = append(out, next, x.lo-1)
		}
		if x.hi+1 > next {
			next = x.hi + 1
		}
	}
	if next <= unicode.MaxRune {
		out = append(out, next, unicode.MaxRune)
	}
	return out
}
