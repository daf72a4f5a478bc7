package tokenizer

import (
	"encoding/json"
	"fmt"

	"github.com/tandemllm/tandem/tokenid"
)

// Tokenizer converts between text and token ids. Implementations in this
// package are immutable after construction and safe for concurrent use.
type Tokenizer interface {
	// Encode tokenizes text the way Hugging Face does for the model:
	// added/special tokens written literally in text (e.g. "<|im_start|>")
	// are recognized as their ids. No BOS is added here.
	Encode(text string) []tokenid.ID
	// Decode returns the text of ids. Byte-level BPE tokenizers render every
	// token, special ones included, as its text (HF skip_special_tokens=False),
	// so Decode(Encode(s)) == s for valid UTF-8. SentencePiece tokenizers
	// render control tokens (BOS, EOS and other type-3 pieces) as nothing,
	// like llama.cpp and llama2.c, and strip the dummy-prefix space of a token
	// that directly follows BOS. Invalid UTF-8 becomes U+FFFD per maximal
	// subpart, as HF (Rust from_utf8_lossy) does. Ids outside the vocabulary
	// render as nothing.
	Decode(ids []tokenid.ID) string
	// AppendTokenBytes appends the raw bytes token id stands for (for
	// byte-level BPE the un-mapped bytes; for SentencePiece '▁'→' ' and
	// <0xXX> → the byte). Used by the incremental detokenizer. Ids outside
	// the vocabulary and SentencePiece control tokens append nothing.
	AppendTokenBytes(dst []byte, id tokenid.ID) []byte
	// VocabSize is one more than the largest id the tokenizer can produce or
	// render; ids below it that name no token (holes) decode to nothing.
	VocabSize() int
	// EOS lists tokens that end generation (e.g. <|im_end|> and
	// <|endoftext|> for Qwen3).
	EOS() []tokenid.ID
	// BOS returns the beginning-of-sequence token if the model uses one and
	// whether it should be prepended; models without one return (-1, false).
	BOS() (tokenid.ID, bool)
	// Fingerprint is a stable hash (hex SHA-256) of the vocabulary, merges
	// and special tokens, used to refuse pairing workers with different
	// tokenizers.
	Fingerprint() string
}

// SpecialTokens is implemented by tokenizers that can say which ids are
// special (HF added tokens with "special": true, SentencePiece control
// tokens). The frontend uses it to mimic skip_special_tokens=True, e.g. so
// that a generated <|im_end|> never reaches the client as text.
type SpecialTokens interface {
	IsSpecial(id tokenid.ID) bool
}

// SpaceAfterBOSStripper is implemented by tokenizers whose encoder adds a
// dummy-prefix space (SentencePiece): the first token after BOS then carries
// a space that is not part of the text, and detokenizers must drop it.
type SpaceAfterBOSStripper interface {
	StripsSpaceAfterBOS() bool
}

// tokenTexter is the zero-copy fast path of the Detokenizer: the bytes of a
// token as a string that shares the tokenizer's storage.
type tokenTexter interface {
	tokenText(id tokenid.ID) string
}

// AddedToken is a token matched literally in the input before the model's
// own algorithm runs (HF "added_tokens", llama.cpp control and user-defined
// tokens).
type AddedToken struct {
	ID      tokenid.ID
	Content string
	// Special marks tokens that HF's skip_special_tokens=True drops.
	Special bool
	// LStrip and RStrip make the token absorb whitespace on that side, as
	// in HF (e.g. "<mask>" in RoBERTa-style vocabularies).
	LStrip bool
	RStrip bool
}

// ChatTemplate renders a chat request into the prompt text.
type ChatTemplate interface {
	// Render takes the request's raw JSON `messages` array and optional raw
	// `tools` array (nil if absent), plus extra kwargs
	// (chat_template_kwargs, e.g. enable_thinking) and
	// add_generation_prompt. Key order inside objects is preserved so that
	// `tojson` output is byte-identical to HF / @huggingface/jinja.
	Render(in ChatInput) (string, error)
}

// ChatInput is what a chat request contributes to template rendering.
type ChatInput struct {
	Messages            json.RawMessage
	Tools               json.RawMessage
	Kwargs              map[string]json.RawMessage
	AddGenerationPrompt bool
}

// Model bundles what the frontend needs for one model.
type Model struct {
	Name          string
	Tokenizer     Tokenizer
	Template      ChatTemplate
	ContextLength int // 0 if unknown
}

// IsSpecial reports whether id is a special token of t, false if t cannot
// tell (see SpecialTokens).
func IsSpecial(t Tokenizer, id tokenid.ID) bool {
	if s, ok := t.(SpecialTokens); ok {
		return s.IsSpecial(id)
	}
	return false
}

// DecodeSkipSpecial is Decode with special tokens removed first, like HF's
// skip_special_tokens=True.
func DecodeSkipSpecial(t Tokenizer, ids []tokenid.ID) string {
	s, ok := t.(SpecialTokens)
	if !ok {
		return t.Decode(ids)
	}
	// A BOS that triggers dummy-prefix stripping must survive the filter,
	// and such tokenizers already render control tokens as nothing.
	bos, _ := t.BOS()
	keepBOS := false
	if st, ok := t.(SpaceAfterBOSStripper); ok && st.StripsSpaceAfterBOS() {
		keepBOS = true
	}
	kept := make([]tokenid.ID, 0, len(ids))
	for _, id := range ids {
		if !s.IsSpecial(id) || (keepBOS && id == bos) {
			kept = append(kept, id)
		}
	}
	return t.Decode(kept)
}

// WithSpecials returns a copy of t (a tokenizer from this package) with the
// given EOS list and BOS; bos < 0 means none. The native engine uses it for
// GGUF vocabularies, whose special ids live in separate metadata keys.
func WithSpecials(t Tokenizer, eos []tokenid.ID, bos tokenid.ID, addBOS bool) (Tokenizer, error) {
	n := tokenid.ID(t.VocabSize())
	for _, e := range eos {
		if e < 0 || e >= n {
			return nil, fmt.Errorf("EOS id %d outside the vocabulary (size %d)", e, n)
		}
	}
	if bos >= n {
		return nil, fmt.Errorf("BOS id %d outside the vocabulary (size %d)", bos, n)
	}
	addBOS = addBOS && bos >= 0
	eos = append([]tokenid.ID(nil), eos...)
	switch v := t.(type) {
	case *byteLevel:
		c := *v
		c.eos, c.bos, c.addBOS = eos, bos, addBOS
		c.fp = finishFingerprint(c.body, c.eos, c.bos, c.addBOS)
		return &c, nil
	case *sentencePiece:
		c := *v
		c.eos = eos
		c.bos, c.hasBOS = bos, addBOS
		c.fp = finishFingerprint(c.body, c.EOS(), c.bos, c.hasBOS)
		return &c, nil
	}
	return nil, fmt.Errorf("WithSpecials: unsupported tokenizer type %T", t)
}
