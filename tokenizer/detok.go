package tokenizer

import (
	"unicode/utf8"

	"github.com/tandemllm/tandem/tokenid"
)

// Detokenizer turns a stream of ids into text incrementally and never emits
// a broken UTF-8 sequence: bytes of an incomplete multi-byte rune are held
// until completed. Ill-formed bytes that no later byte can repair are emitted
// as U+FFFD at once, so the concatenation of every Add plus Flush equals
// Decode of all the ids. A Detokenizer belongs to one stream and is not safe
// for concurrent use.
type Detokenizer struct {
	t    Tokenizer
	text tokenTexter   // zero-copy fast path, nil if t lacks it
	skip SpecialTokens // non-nil when special tokens are dropped

	strip   bool // t's encoder put a dummy-prefix space after BOS
	bos     tokenid.ID
	prev    tokenid.ID
	hasPrev bool

	pending [utf8.UTFMax]byte // incomplete trailing rune, at most 3 bytes
	npend   int
	buf     []byte
	out     []byte
}

// DetokenizerOption configures a Detokenizer.
type DetokenizerOption func(*Detokenizer)

// SkipSpecial drops special tokens (see SpecialTokens) from the text, like
// HF's skip_special_tokens=True; the frontend uses it so that EOS tokens such
// as <|im_end|> are not streamed to clients.
func SkipSpecial() DetokenizerOption {
	return func(d *Detokenizer) {
		if s, ok := d.t.(SpecialTokens); ok {
			d.skip = s
		}
	}
}

// After makes the stream continue after token id (typically the prompt's
// last token) without emitting it. With SentencePiece tokenizers this is what
// strips the dummy-prefix space of a first generated token that follows BOS,
// as llama2.c does when generating from an empty prompt.
func After(id tokenid.ID) DetokenizerOption {
	return func(d *Detokenizer) {
		d.prev, d.hasPrev = id, true
	}
}

// NewDetokenizer returns a Detokenizer for t.
func NewDetokenizer(t Tokenizer, opts ...DetokenizerOption) *Detokenizer {
	d := &Detokenizer{t: t}
	d.text, _ = t.(tokenTexter)
	if s, ok := t.(SpaceAfterBOSStripper); ok && s.StripsSpaceAfterBOS() {
		d.bos, d.strip = t.BOS()
	}
	for _, o := range opts {
		o(d)
	}
	return d
}

// Add feeds ids and returns the text that is now complete.
func (d *Detokenizer) Add(ids ...tokenid.ID) string {
	// The common case, one token whose bytes are whole runes, returns the
	// tokenizer's own string without copying or allocating.
	if len(ids) == 1 && d.npend == 0 && d.text != nil && d.skip == nil {
		id := ids[0]
		afterBOS := d.strip && d.hasPrev && d.prev == d.bos
		// Valid UTF-8 cannot end inside a rune, so nothing needs holding.
		if s := d.text.tokenText(id); s != "" && !afterBOS && utf8.ValidString(s) {
			d.prev, d.hasPrev = id, true
			return s
		}
	}
	d.buf = append(d.buf[:0], d.pending[:d.npend]...)
	for _, id := range ids {
		if d.skip != nil && d.skip.IsSpecial(id) {
			d.prev, d.hasPrev = id, true
			continue
		}
		start := len(d.buf)
		d.buf = d.t.AppendTokenBytes(d.buf, id)
		if d.strip && d.hasPrev && d.prev == d.bos && len(d.buf) > start && d.buf[start] == ' ' {
			d.buf = append(d.buf[:start], d.buf[start+1:]...)
		}
		d.prev, d.hasPrev = id, true
	}
	var n int
	d.out, n = appendLossy(d.out[:0], d.buf, false)
	d.npend = copy(d.pending[:], d.buf[n:])
	if len(d.out) == 0 {
		return ""
	}
	return string(d.out)
}

// Flush returns what is left: held bytes of an incomplete rune become one
// U+FFFD, as HF does at the end of a decode.
func (d *Detokenizer) Flush() string {
	if d.npend == 0 {
		return ""
	}
	d.npend = 0
	return replacementChar
}

// decodeTokens is the shared Decode of both backends: concatenated token
// bytes, the dummy-prefix space dropped after BOS when strip is set, and HF's
// lossy UTF-8 rule.
func decodeTokens(t Tokenizer, ids []tokenid.ID, strip bool, bos tokenid.ID) string {
	buf := make([]byte, 0, len(ids)*4)
	for i, id := range ids {
		start := len(buf)
		buf = t.AppendTokenBytes(buf, id)
		if strip && i > 0 && ids[i-1] == bos && len(buf) > start && buf[start] == ' ' {
			buf = append(buf[:start], buf[start+1:]...)
		}
	}
	return lossyString(buf)
}
