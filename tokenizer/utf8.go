package tokenizer

import (
	"unicode/utf8"
)

// HF decodes token bytes with Rust's String::from_utf8_lossy and
// transformers.js with TextDecoder; both replace each *maximal subpart* of an
// ill-formed sequence with one U+FFFD (Unicode §3.9, Table 3-7). Go's own
// helpers differ (utf8.DecodeRune replaces every bad byte, strings.ToValidUTF8
// every bad run), which would make our text differ from HF's on truncated
// emoji, so the rule is implemented here.

const replacementChar = "\uFFFD"

// scanSeq examines the UTF-8 sequence at the start of b (len(b) > 0).
// A complete, valid rune gives (size, true, false). An ill-formed sequence
// gives the length of its maximal subpart and ok=false; incomplete is true
// when b ended while the bytes were still a valid prefix of a rune, i.e.
// more input could still complete it.
func scanSeq(b []byte) (size int, ok, incomplete bool) {
	c := b[0]
	if c < utf8.RuneSelf {
		return 1, true, false
	}
	need := 0
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1, false, false
	}
	for i := 1; i <= need; i++ {
		if i >= len(b) {
			return i, false, true
		}
		if x := b[i]; x < lo || x > hi {
			return i, false, false
		}
		lo, hi = 0x80, 0xBF
	}
	return need + 1, true, false
}

// appendLossy appends src to dst with ill-formed sequences replaced. Unless
// final, a trailing incomplete-but-valid prefix is left unconsumed (its start
// is returned as consumed) so that a stream can complete it later; this makes
// lossy(a) + lossy(b) equal lossy(a+b) whenever a is split there.
func appendLossy(dst, src []byte, final bool) (out []byte, consumed int) {
	i := 0
	for i < len(src) {
		if src[i] < utf8.RuneSelf {
			j := i + 1
			for j < len(src) && src[j] < utf8.RuneSelf {
				j++
			}
			dst = append(dst, src[i:j]...)
			i = j
			continue
		}
		n, ok, incomplete := scanSeq(src[i:])
		switch {
		case ok:
			dst = append(dst, src[i:i+n]...)
		case incomplete && !final:
			return dst, i
		default:
			dst = append(dst, replacementChar...)
		}
		i += n
	}
	return dst, len(src)
}

// lossyString converts b to a string with HF's replacement rule.
func lossyString(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out, _ := appendLossy(make([]byte, 0, len(b)+8), b, true)
	return string(out)
}

// validText returns s, or s with ill-formed sequences replaced. Encode works
// on valid UTF-8 only because the pre-tokenizer steps backwards over runes;
// the JSON decoder feeding the frontend already guarantees validity, so the
// copy is a cold path.
func validText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return lossyString([]byte(s))
}
