package tokenizer

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"strings"

	"golang.org/x/text/unicode/norm"

	"github.com/tandemllm/tandem/tokenid"
)

// Per-id flags.
const (
	flagPresent uint8 = 1 << iota
	flagSpecial
	flagAdded
)

// vocabStore keeps the bytes of every token in one string, so a token's text
// is a substring (no per-token allocation, and the Detokenizer can hand it out
// without copying).
type vocabStore struct {
	text  string
	off   []uint32 // len = vocab size + 1
	flags []uint8
}

func newVocabStore(tokens []string, flags []uint8) vocabStore {
	var sb strings.Builder
	n := 0
	for _, t := range tokens {
		n += len(t)
	}
	sb.Grow(n)
	off := make([]uint32, len(tokens)+1)
	for i, t := range tokens {
		sb.WriteString(t)
		off[i+1] = off[i] + uint32(len(t))
	}
	return vocabStore{text: sb.String(), off: off, flags: flags}
}

func (v *vocabStore) size() int { return len(v.off) - 1 }

func (v *vocabStore) get(id tokenid.ID) string {
	if id < 0 || int(id) >= v.size() {
		return ""
	}
	return v.text[v.off[id]:v.off[id+1]]
}

func (v *vocabStore) flag(id tokenid.ID, f uint8) bool {
	return id >= 0 && int(id) < len(v.flags) && v.flags[id]&f != 0
}

// byteLevelConfig is everything a byte-level BPE tokenizer is built from,
// whatever file it came from.
type byteLevelConfig struct {
	kind   string   // "tiktoken" or "hf-bpe", part of the fingerprint
	tokens []string // id → raw bytes; "" with present=false for holes
	// present marks ids that name a token.
	present []bool
	// vocab maps raw bytes → id for the model's own vocabulary.
	vocab map[string]int
	// merges are (left, right) id pairs in rank order; nil selects
	// tiktoken's rule (a pair's rank is its concatenation's id).
	merges       [][2]int32
	ignoreMerges bool
	pattern      string // "" means no split
	nfc          bool
	prefixSpace  bool
	added        []AddedToken
	eos          []tokenid.ID
	bos          tokenid.ID
	addBOS       bool
}

// byteLevel is a byte-level BPE tokenizer (GPT-2 lineage: tiktoken, HF
// ByteLevel, llama.cpp "gpt2").
type byteLevel struct {
	store        vocabStore
	m            merger
	byteTok      [256]int32
	rankMode     bool
	ignoreMerges bool
	split        splitter
	nfc          bool
	prefixSpace  bool
	added        *addedMatcher
	eos          []tokenid.ID
	bos          tokenid.ID
	addBOS       bool
	body         []byte // fingerprint of everything but EOS/BOS
	fp           string
}

func newByteLevel(cfg byteLevelConfig) (*byteLevel, error) {
	n := len(cfg.tokens)
	if n == 0 {
		return nil, fmt.Errorf("empty vocabulary")
	}
	b := &byteLevel{
		rankMode:     cfg.merges == nil,
		ignoreMerges: cfg.ignoreMerges,
		nfc:          cfg.nfc,
		prefixSpace:  cfg.prefixSpace,
		eos:          append([]tokenid.ID(nil), cfg.eos...),
		bos:          cfg.bos,
		addBOS:       cfg.addBOS,
	}
	flags := make([]uint8, n)
	tokens := cfg.tokens
	for i := range tokens {
		if cfg.present[i] {
			flags[i] = flagPresent
		}
	}
	for _, a := range cfg.added {
		if a.ID < 0 || int(a.ID) >= n {
			return nil, fmt.Errorf("added token %q has id %d outside the vocabulary (size %d)", a.Content, a.ID, n)
		}
		tokens[a.ID] = a.Content
		flags[a.ID] |= flagPresent | flagAdded
		if a.Special {
			flags[a.ID] |= flagSpecial
		}
	}
	b.store = newVocabStore(tokens, flags)
	for c := 0; c < 256; c++ {
		id, ok := cfg.vocab[string([]byte{byte(c)})]
		if !ok {
			return nil, fmt.Errorf("vocabulary lacks the single-byte token 0x%02x, which byte-level BPE needs", c)
		}
		b.byteTok[c] = int32(id)
	}
	b.m.vocab = cfg.vocab
	if !b.rankMode {
		b.m.pairs = make(map[uint64]uint64, len(cfg.merges))
		for rank, p := range cfg.merges {
			merged, ok := cfg.vocab[b.store.get(p[0])+b.store.get(p[1])]
			if !ok {
				return nil, fmt.Errorf("merge %d (%q %q): merged token not in vocabulary", rank, b.store.get(p[0]), b.store.get(p[1]))
			}
			k := pairKey(p[0], p[1])
			if _, dup := b.m.pairs[k]; !dup {
				b.m.pairs[k] = uint64(rank)<<32 | uint64(uint32(merged))
			}
		}
	}
	if cfg.pattern != "" {
		sp, err := newSplitter(cfg.pattern)
		if err != nil {
			return nil, err
		}
		b.split = sp
	}
	b.added = newAddedMatcher(cfg.added)
	b.body = b.fingerprintBody(cfg)
	b.fp = finishFingerprint(b.body, b.eos, b.bos, b.addBOS)
	return b, nil
}

// fingerprintBody hashes what decides the ids of a text: vocabulary, merges,
// pipeline and added tokens. EOS/BOS are mixed in by finishFingerprint so
// WithSpecials can change them without rehashing the vocabulary.
func (b *byteLevel) fingerprintBody(cfg byteLevelConfig) []byte {
	h := sha256.New()
	writeStr(h, "tandem-tokenizer-v1/"+cfg.kind)
	hashStore(h, &b.store)
	writeInt(h, int64(len(cfg.merges)))
	for _, p := range cfg.merges {
		writeInt(h, int64(p[0]))
		writeInt(h, int64(p[1]))
	}
	writeStr(h, fmt.Sprintf("ignore=%v nfc=%v prefix=%v split=%q", cfg.ignoreMerges, cfg.nfc, cfg.prefixSpace, cfg.pattern))
	hashAdded(h, cfg.added)
	return h.Sum(nil)
}

// hashStore hashes the token bytes, boundaries and flags in three writes; a
// write per token made fingerprinting a third of Default's time.
func hashStore(h hash.Hash, v *vocabStore) {
	writeInt(h, int64(v.size()))
	io.WriteString(h, v.text)
	buf := make([]byte, 4*len(v.off))
	for i, o := range v.off {
		binary.LittleEndian.PutUint32(buf[4*i:], o)
	}
	h.Write(buf)
	h.Write(v.flags)
}

func hashAdded(h hash.Hash, added []AddedToken) {
	writeInt(h, int64(len(added)))
	for _, a := range added {
		writeInt(h, int64(a.ID))
		writeStr(h, a.Content)
		writeStr(h, fmt.Sprintf("%v%v%v", a.Special, a.LStrip, a.RStrip))
	}
}

func finishFingerprint(body []byte, eos []tokenid.ID, bos tokenid.ID, addBOS bool) string {
	h := sha256.New()
	h.Write(body)
	writeInt(h, int64(len(eos)))
	for _, e := range eos {
		writeInt(h, int64(e))
	}
	writeInt(h, int64(bos))
	writeStr(h, fmt.Sprint(addBOS))
	return hex.EncodeToString(h.Sum(nil))
}

func writeInt(h hash.Hash, v int64) {
	var buf [binary.MaxVarintLen64]byte
	h.Write(buf[:binary.PutVarint(buf[:], v)])
}

func writeStr(h hash.Hash, s string) {
	writeInt(h, int64(len(s)))
	io.WriteString(h, s)
}

// Encode implements Tokenizer.
func (b *byteLevel) Encode(text string) []tokenid.ID {
	text = validText(text)
	out := make([]tokenid.ID, 0, len(text)/3+4)
	pos := 0
	if !b.added.empty() {
		for pos < len(text) {
			start, end, id, ok := b.added.find(text, pos)
			if !ok {
				break
			}
			out = b.encodeText(out, text[pos:start])
			out = append(out, id)
			pos = end
		}
	}
	return b.encodeText(out, text[pos:])
}

// encodeText encodes a stretch of text that holds no added token.
func (b *byteLevel) encodeText(out []tokenid.ID, s string) []tokenid.ID {
	if s == "" {
		return out
	}
	if b.nfc {
		s = norm.NFC.String(s)
	}
	if b.prefixSpace && s[0] != ' ' {
		s = " " + s
	}
	switch sp := b.split.(type) {
	case *nativeSplitter:
		for pos := 0; pos < len(s); {
			end := sp.next(s, pos)
			out = b.encodeWord(out, s[pos:end])
			pos = end
		}
	case *regexSplitter:
		pos := 0
		for _, end := range sp.ends(s) {
			out = b.encodeWord(out, s[pos:end])
			pos = end
		}
	default:
		out = b.encodeWord(out, s)
	}
	return out
}

func (b *byteLevel) encodeWord(out []tokenid.ID, w string) []tokenid.ID {
	if len(w) == 1 {
		return append(out, b.byteTok[w[0]])
	}
	// tiktoken and HF's ignore_merges take a whole-word vocabulary hit as is;
	// for tiktoken this is also what its merge rule would produce.
	if b.rankMode || b.ignoreMerges {
		if id, ok := b.m.vocab[w]; ok {
			return append(out, tokenid.ID(id))
		}
	}
	var buf [smallWord]bpeSym
	var syms []bpeSym
	if len(w) <= smallWord {
		syms = buf[:len(w)]
	} else {
		syms = make([]bpeSym, len(w))
	}
	for i := range syms {
		syms[i] = bpeSym{start: int32(i), end: int32(i + 1), id: b.byteTok[w[i]], prev: int32(i - 1), next: int32(i + 1)}
	}
	syms[len(syms)-1].next = -1
	b.m.merge(w, syms)
	for i := int32(0); i >= 0; i = syms[i].next {
		out = append(out, syms[i].id)
	}
	return out
}

// Decode implements Tokenizer: every token, special ones included, is
// rendered as its text.
func (b *byteLevel) Decode(ids []tokenid.ID) string {
	return decodeTokens(b, ids, false, 0)
}

// AppendTokenBytes implements Tokenizer.
func (b *byteLevel) AppendTokenBytes(dst []byte, id tokenid.ID) []byte {
	return append(dst, b.store.get(id)...)
}

func (b *byteLevel) tokenText(id tokenid.ID) string { return b.store.get(id) }

// VocabSize implements Tokenizer.
func (b *byteLevel) VocabSize() int { return b.store.size() }

// EOS implements Tokenizer.
func (b *byteLevel) EOS() []tokenid.ID { return append([]tokenid.ID(nil), b.eos...) }

// BOS implements Tokenizer.
func (b *byteLevel) BOS() (tokenid.ID, bool) { return b.bos, b.addBOS }

// Fingerprint implements Tokenizer.
func (b *byteLevel) Fingerprint() string { return b.fp }

// IsSpecial implements SpecialTokens.
func (b *byteLevel) IsSpecial(id tokenid.ID) bool { return b.store.flag(id, flagSpecial) }

// gpt2ByteAlphabet returns GPT-2's bytes_to_unicode table: byte-level BPE
// vocabularies spell byte b as the rune alphabet[b], so that every token is
// printable text in JSON.
func gpt2ByteAlphabet() [256]rune {
	var a [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			a[b] = rune(b)
		} else {
			a[b] = rune(256 + n)
			n++
		}
	}
	return a
}

// byteUnmapper turns byte-level alphabet strings back into raw bytes.
type byteUnmapper struct {
	rev [324]int16 // rune → byte, -1 if the rune is not in the alphabet
}

func newByteUnmapper() *byteUnmapper {
	u := &byteUnmapper{}
	for i := range u.rev {
		u.rev[i] = -1
	}
	for b, r := range gpt2ByteAlphabet() {
		u.rev[r] = int16(b)
	}
	return u
}

// unmap returns the raw bytes of s, or ok=false if s uses a rune outside the
// alphabet (then s is not a byte-level token, e.g. an added token stored in
// the vocabulary, and is kept as literal text).
func (u *byteUnmapper) unmap(s string) (string, bool) {
	var buf [64]byte
	out := buf[:0]
	for _, r := range s {
		if r < 0 || int(r) >= len(u.rev) || u.rev[r] < 0 {
			return s, false
		}
		out = append(out, byte(u.rev[r]))
	}
	return string(out), true
}
