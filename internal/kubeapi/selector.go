package kubeapi

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Selector is a parsed label selector: requirements joined by commas,
// each "k=v", "k==v", "k!=v", "k in (a,b)", "k notin (a,b)", "k" (exists)
// or "!k" (does not exist), as the API server reads them.
type Selector []requirement

type requirement struct {
	key    string
	op     string // "=", "!=", "in", "notin", "exists", "!"
	values []string
}

var (
	labelName   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	dnsSubdom   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	selectorTok = regexp.MustCompile(`\s*(!=|==|=|\(|\)|,|!|[^\s!=(),]+)`)
)

func validKey(k string) error {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	} else if prefix == "" || len(prefix) > 253 || !dnsSubdom.MatchString(prefix) {
		return fmt.Errorf("label key %q: invalid prefix", k)
	}
	if name == "" || len(name) > 63 || !labelName.MatchString(name) {
		return fmt.Errorf("label key %q: a name is at most 63 alphanumeric characters, '-', '_' or '.', starting and ending alphanumeric", k)
	}
	return nil
}

func validValue(v string) error {
	if v == "" {
		return nil
	}
	if len(v) > 63 || !labelName.MatchString(v) {
		return fmt.Errorf("label value %q: at most 63 alphanumeric characters, '-', '_' or '.', starting and ending alphanumeric", v)
	}
	return nil
}

// ParseSelector parses and validates a label selector; "" selects
// everything.
func ParseSelector(s string) (Selector, error) {
	var toks []string
	rest := s
	for strings.TrimSpace(rest) != "" {
		m := selectorTok.FindStringSubmatchIndex(rest)
		if m == nil || m[0] != 0 {
			return nil, fmt.Errorf("label selector %q: unexpected %q", s, strings.TrimSpace(rest))
		}
		toks = append(toks, rest[m[2]:m[3]])
		rest = rest[m[1]:]
	}
	var sel Selector
	i := 0
	next := func() string {
		if i < len(toks) {
			i++
			return toks[i-1]
		}
		return ""
	}
	peek := func() string {
		if i < len(toks) {
			return toks[i]
		}
		return ""
	}
	isWord := func(t string) bool { return t != "" && !strings.ContainsAny(t[:1], "!=(),") }
	for i < len(toks) {
		var r requirement
		if peek() == "!" {
			next()
			r.key, r.op = next(), "!"
			if !isWord(r.key) {
				return nil, fmt.Errorf("label selector %q: a key must follow '!'", s)
			}
		} else {
			r.key = next()
			if !isWord(r.key) {
				return nil, fmt.Errorf("label selector %q: expected a key, found %q", s, r.key)
			}
			switch op := peek(); op {
			case "", ",":
				r.op = "exists"
			case "=", "==", "!=":
				next()
				r.op = "="
				if op == "!=" {
					r.op = "!="
				}
				v := ""
				if isWord(peek()) {
					v = next()
				}
				r.values = []string{v}
			case "in", "notin":
				next()
				r.op = op
				if next() != "(" {
					return nil, fmt.Errorf("label selector %q: expected '(' after %s", s, op)
				}
				for {
					t := next()
					switch {
					case t == ")" && len(r.values) == 0:
						return nil, fmt.Errorf("label selector %q: %s needs at least one value", s, op)
					case t == ")":
					case isWord(t):
						r.values = append(r.values, t)
						if sep := next(); sep == "," {
							continue
						} else if sep != ")" {
							return nil, fmt.Errorf("label selector %q: expected ',' or ')' in the %s set", s, op)
						}
					default:
						return nil, fmt.Errorf("label selector %q: unexpected %q in the %s set", s, t, op)
					}
					break
				}
			default:
				return nil, fmt.Errorf("label selector %q: unexpected %q after key %q", s, op, r.key)
			}
		}
		if err := validKey(r.key); err != nil {
			return nil, fmt.Errorf("label selector %q: %w", s, err)
		}
		for _, v := range r.values {
			if err := validValue(v); err != nil {
				return nil, fmt.Errorf("label selector %q: %w", s, err)
			}
		}
		sel = append(sel, r)
		if i < len(toks) {
			if next() != "," {
				return nil, fmt.Errorf("label selector %q: expected ',' between requirements", s)
			}
			if i == len(toks) {
				return nil, fmt.Errorf("label selector %q: ends with ','", s)
			}
		}
	}
	return sel, nil
}

// Matches reports whether the labels satisfy every requirement.
func (sel Selector) Matches(labels map[string]string) bool {
	for _, r := range sel {
		v, has := labels[r.key]
		switch r.op {
		case "exists":
			if !has {
				return false
			}
		case "!":
			if has {
				return false
			}
		case "=", "in":
			if !has || !slices.Contains(r.values, v) {
				return false
			}
		case "!=", "notin":
			if has && slices.Contains(r.values, v) {
				return false
			}
		}
	}
	return true
}
