package structured

import (
	"math"
	"strconv"
)

// Generation bounds that keep outputs short; every bound narrows what is
// generated, never what a schema accepts, so outputs stay valid.
const (
	maxIntDigits  = 15 // integers of at most 15 digits (exact in a float64)
	maxFracDigits = 15
	genericDepth  = 6    // nesting of values a schema leaves free
	lengthCap     = 1024 // maxLength above this is capped (a subset) unless minLength needs more
)

// jsonRules are the shared JSON building blocks of one builder.
type jsonRules struct {
	b       *builder
	ws      int32 // " " | ε: after ':' and ','
	char    int32 // one JSON string character (one code point)
	str     int32 // a JSON string
	integer int32
	number  int32
	boolean int32
	null    int32
	value   []int32 // generic value by remaining depth
}

func rangeSet(lo, hi byte) byteSet {
	var s byteSet
	s.addRange(lo, hi)
	return s
}

func newJSONRules(b *builder) *jsonRules {
	j := &jsonRules{b: b}
	j.ws = b.choice(lit(" "), nil)
	// A string character: printable ASCII but '"' and '\\', a short
	// escape, or one well-formed UTF-8 sequence (RFC 3629 table).
	var ascii byteSet
	ascii.addRange(0x20, 0x7f)
	ascii[0x22>>6] &^= 1 << (0x22 & 63)
	ascii[0x5c>>6] &^= 1 << (0x5c & 63)
	var esc byteSet
	for _, c := range []byte(`"\/bfnrt`) {
		esc.add(c)
	}
	cont := term(rangeSet(0x80, 0xbf))
	j.char = b.choice(
		[]elem{term(ascii)},
		[]elem{oneByte('\\'), term(esc)},
		[]elem{term(rangeSet(0xc2, 0xdf)), cont},
		[]elem{oneByte(0xe0), term(rangeSet(0xa0, 0xbf)), cont},
		[]elem{term(rangeSet(0xe1, 0xec)), cont, cont},
		[]elem{oneByte(0xed), term(rangeSet(0x80, 0x9f)), cont},
		[]elem{term(rangeSet(0xee, 0xef)), cont, cont},
		[]elem{oneByte(0xf0), term(rangeSet(0x90, 0xbf)), cont, cont},
		[]elem{term(rangeSet(0xf1, 0xf3)), cont, cont, cont},
		[]elem{oneByte(0xf4), term(rangeSet(0x80, 0x8f)), cont, cont},
	)
	if b.char == 0 {
		b.char = j.char
	}
	j.str = b.seqRule("string", oneByte('"'), ref(b.star(ref(j.char))), oneByte('"'))
	digit := term(rangeSet('0', '9'))
	intPart := b.choice(lit("0"), []elem{term(rangeSet('1', '9')), ref(b.repeat(0, maxIntDigits-1, digit))})
	j.integer = b.seqRule("integer", ref(b.choice(lit("-"), nil)), ref(intPart))
	frac := b.choice([]elem{oneByte('.'), ref(b.repeat(1, maxFracDigits, digit))}, nil)
	j.number = b.seqRule("number", ref(j.integer), ref(frac))
	j.boolean = b.choice(lit("true"), lit("false"))
	j.null = b.seqRule("null", lit("null")...)
	return j
}

// genericValue is any JSON value nested at most depth deep.
func (j *jsonRules) genericValue(depth int) int32 {
	for len(j.value) <= depth {
		d := len(j.value)
		b := j.b
		v := b.newRule("value")
		j.value = append(j.value, v)
		b.alt(v, ref(j.str))
		b.alt(v, ref(j.number))
		b.alt(v, ref(j.boolean))
		b.alt(v, ref(j.null))
		if d > 0 {
			inner := j.value[d-1]
			b.alt(v, ref(j.array(inner, 0, -1)))
			b.alt(v, ref(j.mapOf(inner, 0, -1)))
		}
	}
	return j.value[depth]
}

// array is "[" items "]" with between min and max items (max < 0:
// unbounded).
func (j *jsonRules) array(item int32, min, max int) int32 {
	b := j.b
	r := b.newRule("array")
	if min == 0 {
		b.alt(r, lit("[]")...)
		if max == 0 {
			return r
		}
		min = 1
	}
	more := -1
	if max >= 0 {
		more = max - 1
	}
	rest := b.repeat(min-1, more, oneByte(','), ref(j.ws), ref(item))
	b.alt(r, oneByte('['), ref(item), ref(rest), oneByte(']'))
	return r
}

// mapOf is an object of any string keys with values of rule val.
func (j *jsonRules) mapOf(val int32, min, max int) int32 {
	b := j.b
	member := b.seqRule("member", ref(j.str), oneByte(':'), ref(j.ws), ref(val))
	r := b.newRule("object")
	if min == 0 {
		b.alt(r, lit("{}")...)
		if max == 0 {
			return r
		}
		min = 1
	}
	more := -1
	if max >= 0 {
		more = max - 1
	}
	rest := b.repeat(0, more, oneByte(','), ref(j.ws), ref(member))
	b.alt(r, oneByte('{'), ref(member), ref(rest), oneByte('}'))
	return r
}

// digitsRange is the alternatives (each a sequence of digit sets) matching
// the decimal numbers in [lo, hi] written without leading zeros.
func digitsRange(lo, hi uint64) [][]byteSet {
	if lo > hi {
		return nil
	}
	var out [][]byteSet
	for d := 1; d <= 20; d++ {
		var dlo, dhi uint64
		if d == 1 {
			dlo = 0
		} else {
			dlo = pow10(d - 1)
		}
		dhi = pow10(d) - 1
		if d == 20 {
			dhi = math.MaxUint64
		}
		a, z := max(lo, dlo), min(hi, dhi)
		if a <= z {
			out = append(out, sameLen(strconv.FormatUint(a, 10), strconv.FormatUint(z, 10))...)
		}
		if dhi >= hi {
			break
		}
	}
	return out
}

func pow10(n int) uint64 {
	p := uint64(1)
	for ; n > 0; n-- {
		p *= 10
	}
	return p
}

func digitSet(lo, hi byte) byteSet { return rangeSet(lo, hi) }

// sameLen covers [a, b] for decimal strings of equal length.
func sameLen(a, b string) [][]byteSet {
	if a == b {
		seq := make([]byteSet, len(a))
		for i := range a {
			seq[i] = digitSet(a[i], a[i])
		}
		return [][]byteSet{seq}
	}
	if len(a) == 1 {
		return [][]byteSet{{digitSet(a[0], b[0])}}
	}
	if a[0] == b[0] {
		var out [][]byteSet
		for _, s := range sameLen(a[1:], b[1:]) {
			out = append(out, append([]byteSet{digitSet(a[0], a[0])}, s...))
		}
		return out
	}
	n := len(a) - 1
	zeros, nines := repeatStr('0', n), repeatStr('9', n)
	var out [][]byteSet
	lo, hi := a[0], b[0]
	if a[1:] != zeros {
		for _, s := range sameLen(a[1:], nines) {
			out = append(out, append([]byteSet{digitSet(a[0], a[0])}, s...))
		}
		lo++
	}
	top := hi
	if b[1:] != nines {
		top--
	}
	if lo <= top {
		seq := []byteSet{digitSet(lo, top)}
		for i := 0; i < n; i++ {
			seq = append(seq, digitSet('0', '9'))
		}
		out = append(out, seq)
	}
	if b[1:] != nines {
		for _, s := range sameLen(zeros, b[1:]) {
			out = append(out, append([]byteSet{digitSet(b[0], b[0])}, s...))
		}
	}
	return out
}

func repeatStr(c byte, n int) string {
	s := make([]byte, n)
	for i := range s {
		s[i] = c
	}
	return string(s)
}

// intRange is a rule matching the integers in [lo, hi].
func (j *jsonRules) intRange(lo, hi int64) int32 {
	b := j.b
	r := b.newRule("intrange")
	addSeqs := func(prefix []elem, seqs [][]byteSet) {
		for _, s := range seqs {
			es := append([]elem{}, prefix...)
			for _, bs := range s {
				es = append(es, term(bs))
			}
			b.alt(r, es...)
		}
	}
	if hi >= 0 {
		addSeqs(nil, digitsRange(uint64(max(lo, 0)), uint64(hi)))
	}
	if lo < 0 {
		// negatives: "-" then |x| in [max(1,-hi), -lo]
		nlo := uint64(1)
		if hi < 0 {
			nlo = uint64(-hi)
		}
		addSeqs(lit("-"), digitsRange(nlo, uint64(-lo)))
	}
	return r
}
