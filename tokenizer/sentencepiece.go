package tokenizer

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tandemllm/tandem/tokenid"
)

// SentencePiece / GGUF token types (tokenizer.ggml.token_type).
const (
	TypeNormal      int32 = 1
	TypeUnknown     int32 = 2
	TypeControl     int32 = 3
	TypeUserDefined int32 = 4
	TypeUnused      int32 = 5
	TypeByte        int32 = 6
)

// maxTokenizerFile bounds what LoadLlama2C reads; real files are under 1 MB,
// and a bound keeps a wrong path (a checkpoint) from being slurped.
const maxTokenizerFile = 64 << 20

type spConfig struct {
	kind   string
	pieces []string
	scores []float32
	types  []int32
	bos    tokenid.ID
	eos    tokenid.ID
	// literal makes control and user-defined pieces match literally in text,
	// as HF and llama.cpp (parse_special) do; llama2.c does not.
	literal bool
}

// sentencePiece is SentencePiece-style BPE: pieces carry scores, the pair
// whose merged piece scores highest merges first, text gets a dummy-prefix
// space, and characters missing from the vocabulary fall back to <0xXX>
// byte pieces.
type sentencePiece struct {
	store   vocabStore // decoded bytes: '▁'→' ', <0xXX>→byte, control→""
	m       merger
	byteTok [256]int32
	unk     int32
	bos     tokenid.ID
	eos     []tokenid.ID
	hasBOS  bool
	prefix  bool
	added   *addedMatcher
	body    []byte // fingerprint of everything but EOS/BOS
	fp      string
}

// NewSentencePieceBPE builds a tokenizer from a llama.cpp "llama" vocabulary
// (GGUF tokenizer.ggml.tokens/scores/token_type). types may be nil, in which
// case <0xXX> pieces are bytes, bos/eos are control and "<unk>" is unknown.
// bos or eos < 0 means the model has none. Control and user-defined pieces
// are recognized when written literally in text.
func NewSentencePieceBPE(pieces []string, scores []float32, types []int32, bos, eos tokenid.ID) (Tokenizer, error) {
	return newSentencePiece(spConfig{kind: "spm", pieces: pieces, scores: scores, types: types, bos: bos, eos: eos, literal: true})
}

// LoadLlama2C reads a llama2.c tokenizer .bin: int32 max_token_length, then
// per token a float32 score, an int32 length and the bytes (little-endian).
// The vocabulary size is not stored; tokens run to the end of the file. Id 0
// is <unk>, 1 BOS and 2 EOS, as in llama2.c.
func LoadLlama2C(path string) (Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("llama2.c tokenizer: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxTokenizerFile+1))
	if err != nil {
		return nil, fmt.Errorf("llama2.c tokenizer %s: %w", path, err)
	}
	if len(data) > maxTokenizerFile {
		return nil, fmt.Errorf("llama2.c tokenizer %s: larger than %d bytes, not a tokenizer file", path, maxTokenizerFile)
	}
	t, err := parseLlama2C(data)
	if err != nil {
		return nil, fmt.Errorf("llama2.c tokenizer %s: %w", path, err)
	}
	return t, nil
}

func parseLlama2C(data []byte) (*sentencePiece, error) {
	if len(data) < 4 {
		return nil, fmt.Errorf("truncated: %d bytes, need at least the 4-byte header", len(data))
	}
	maxLen := int32(binary.LittleEndian.Uint32(data))
	if maxLen <= 0 || maxLen > 1<<16 {
		return nil, fmt.Errorf("implausible max_token_length %d (corrupt or not a llama2.c tokenizer)", maxLen)
	}
	var pieces []string
	var scores []float32
	for p := 4; p < len(data); {
		i := len(pieces)
		if len(data)-p < 8 {
			return nil, fmt.Errorf("truncated: token %d header needs 8 bytes at offset %d, %d left", i, p, len(data)-p)
		}
		score := math.Float32frombits(binary.LittleEndian.Uint32(data[p:]))
		n := int32(binary.LittleEndian.Uint32(data[p+4:]))
		p += 8
		if n < 0 || n > maxLen {
			return nil, fmt.Errorf("token %d at offset %d: length %d outside 0..max_token_length %d", i, p-8, n, maxLen)
		}
		if len(data)-p < int(n) {
			return nil, fmt.Errorf("truncated: token %d needs %d bytes at offset %d, %d left", i, n, p, len(data)-p)
		}
		pieces = append(pieces, string(data[p:p+int(n)]))
		scores = append(scores, score)
		p += int(n)
	}
	if len(pieces) < 3 {
		return nil, fmt.Errorf("only %d tokens; llama2.c vocabularies start with <unk>, BOS, EOS", len(pieces))
	}
	types := make([]int32, len(pieces))
	for i, p := range pieces {
		switch {
		case i == 0:
			types[i] = TypeUnknown
		case i == 1 || i == 2:
			types[i] = TypeControl
		case isBytePiece(p):
			types[i] = TypeByte
		default:
			types[i] = TypeNormal
		}
	}
	return newSentencePiece(spConfig{kind: "llama2c", pieces: pieces, scores: scores, types: types, bos: 1, eos: 2})
}

// isBytePiece reports whether p is a byte-fallback piece such as "<0x0A>".
func isBytePiece(p string) bool {
	if len(p) != 6 || !strings.HasPrefix(p, "<0x") || p[5] != '>' {
		return false
	}
	_, err := strconv.ParseUint(p[3:5], 16, 8)
	return err == nil
}

func newSentencePiece(cfg spConfig) (*sentencePiece, error) {
	n := len(cfg.pieces)
	if n == 0 {
		return nil, errors.New("empty vocabulary")
	}
	if len(cfg.scores) != n {
		return nil, fmt.Errorf("%d pieces but %d scores", n, len(cfg.scores))
	}
	if cfg.types != nil && len(cfg.types) != n {
		return nil, fmt.Errorf("%d pieces but %d token types", n, len(cfg.types))
	}
	inRange := func(id tokenid.ID) bool { return id >= 0 && int(id) < n }
	if cfg.bos >= 0 && !inRange(cfg.bos) || cfg.eos >= 0 && !inRange(cfg.eos) {
		return nil, fmt.Errorf("bos %d or eos %d outside the vocabulary (size %d)", cfg.bos, cfg.eos, n)
	}
	types := cfg.types
	if types == nil {
		types = make([]int32, n)
		for i, p := range cfg.pieces {
			switch {
			case tokenid.ID(i) == cfg.bos || tokenid.ID(i) == cfg.eos:
				types[i] = TypeControl
			case isBytePiece(p):
				types[i] = TypeByte
			case p == "<unk>":
				types[i] = TypeUnknown
			default:
				types[i] = TypeNormal
			}
		}
	}
	s := &sentencePiece{
		unk:    -1,
		bos:    cfg.bos,
		hasBOS: cfg.bos >= 0,
		prefix: true,
	}
	if cfg.eos >= 0 {
		s.eos = []tokenid.ID{cfg.eos}
	}
	for i := range s.byteTok {
		s.byteTok[i] = -1
	}
	text := make([]string, n)
	flags := make([]uint8, n)
	vocab := make(map[string]int, n)
	var added []AddedToken
	for i, p := range cfg.pieces {
		flags[i] = flagPresent
		switch types[i] {
		case TypeByte:
			if !isBytePiece(p) {
				return nil, fmt.Errorf("token %d %q has the byte type but is not <0xXX>", i, p)
			}
			v, _ := strconv.ParseUint(p[3:5], 16, 8)
			text[i] = string([]byte{byte(v)})
			if s.byteTok[v] < 0 {
				s.byteTok[v] = int32(i)
			}
		case TypeControl:
			flags[i] |= flagSpecial
			if cfg.literal && p != "" {
				added = append(added, AddedToken{ID: tokenid.ID(i), Content: p, Special: true})
			}
		case TypeUnknown:
			text[i] = p
			if s.unk < 0 {
				s.unk = int32(i)
			}
		default:
			t := strings.ReplaceAll(p, "▁", " ")
			text[i] = t
			if types[i] == TypeUnused {
				break
			}
			if types[i] == TypeUserDefined && cfg.literal && t != "" {
				added = append(added, AddedToken{ID: tokenid.ID(i), Content: t})
			}
			if _, dup := vocab[t]; !dup && t != "" {
				vocab[t] = i
			}
		}
	}
	if s.unk < 0 {
		s.unk = 0
	}
	s.store = newVocabStore(text, flags)
	s.m.vocab = vocab
	s.m.rank = scoreRanks(cfg.scores)
	s.added = newAddedMatcher(added)

	h := sha256.New()
	writeStr(h, "tandem-tokenizer-v1/"+cfg.kind)
	writeInt(h, int64(n))
	for i, p := range cfg.pieces {
		writeStr(h, p)
		writeInt(h, int64(types[i]))
		writeInt(h, int64(math.Float32bits(cfg.scores[i])))
	}
	hashAdded(h, added)
	s.body = h.Sum(nil)
	s.fp = finishFingerprint(s.body, s.EOS(), s.bos, s.hasBOS)
	return s, nil
}

// scoreRanks turns scores into merge ranks: higher score, lower rank; equal
// scores (even 0 and -0) share a rank so that ties fall to the leftmost pair,
// as in llama2.c and llama.cpp. NaN ranks last.
func scoreRanks(scores []float32) []uint32 {
	order := make([]int, len(scores))
	for i := range order {
		order[i] = i
	}
	key := func(i int) float32 {
		if v := scores[i]; v == v {
			return v
		}
		return float32(math.Inf(-1))
	}
	sort.Slice(order, func(a, b int) bool { return key(order[a]) > key(order[b]) })
	ranks := make([]uint32, len(scores))
	r := uint32(0)
	for k, i := range order {
		if k > 0 && key(i) != key(order[k-1]) {
			r++
		}
		ranks[i] = r
	}
	return ranks
}

// Encode implements Tokenizer. A dummy-prefix space goes before the text and
// after every literal special token, as llama.cpp does.
func (s *sentencePiece) Encode(text string) []tokenid.ID {
	text = validText(text)
	out := make([]tokenid.ID, 0, len(text)/3+4)
	pos := 0
	if !s.added.empty() {
		for pos < len(text) {
			start, end, id, ok := s.added.find(text, pos)
			if !ok {
				break
			}
			out = s.encodeText(out, text[pos:start])
			out = append(out, id)
			pos = end
		}
	}
	return s.encodeText(out, text[pos:])
}

func (s *sentencePiece) encodeText(out []tokenid.ID, text string) []tokenid.ID {
	if text == "" {
		return out
	}
	if s.prefix {
		text = " " + text
	}
	nr := utf8.RuneCountInString(text)
	var buf [smallWord]bpeSym
	var syms []bpeSym
	if nr <= smallWord {
		syms = buf[:nr]
	} else {
		syms = make([]bpeSym, nr)
	}
	i := 0
	for pos := 0; pos < len(text); i++ {
		_, w := utf8.DecodeRuneInString(text[pos:])
		id := int32(-1)
		if v, ok := s.m.vocab[text[pos:pos+w]]; ok {
			id = int32(v)
		}
		syms[i] = bpeSym{start: int32(pos), end: int32(pos + w), id: id, prev: int32(i - 1), next: int32(i + 1)}
		pos += w
	}
	syms[nr-1].next = -1
	s.m.merge(text, syms)
	for i := int32(0); i >= 0; i = syms[i].next {
		sym := &syms[i]
		if sym.id >= 0 {
			out = append(out, sym.id)
			continue
		}
		for _, c := range []byte(text[sym.start:sym.end]) {
			if t := s.byteTok[c]; t >= 0 {
				out = append(out, t)
			} else {
				out = append(out, s.unk)
			}
		}
	}
	return out
}

// Decode implements Tokenizer.
func (s *sentencePiece) Decode(ids []tokenid.ID) string {
	return decodeTokens(s, ids, s.StripsSpaceAfterBOS(), s.bos)
}

// AppendTokenBytes implements Tokenizer.
func (s *sentencePiece) AppendTokenBytes(dst []byte, id tokenid.ID) []byte {
	return append(dst, s.store.get(id)...)
}

func (s *sentencePiece) tokenText(id tokenid.ID) string { return s.store.get(id) }

// VocabSize implements Tokenizer.
func (s *sentencePiece) VocabSize() int { return s.store.size() }

// EOS implements Tokenizer.
func (s *sentencePiece) EOS() []tokenid.ID { return append([]tokenid.ID(nil), s.eos...) }

// BOS implements Tokenizer: SentencePiece models prepend BOS.
func (s *sentencePiece) BOS() (tokenid.ID, bool) { return s.bos, s.hasBOS }

// Fingerprint implements Tokenizer.
func (s *sentencePiece) Fingerprint() string { return s.fp }

// IsSpecial implements SpecialTokens: control pieces are special.
func (s *sentencePiece) IsSpecial(id tokenid.ID) bool { return s.store.flag(id, flagSpecial) }

// StripsSpaceAfterBOS implements SpaceAfterBOSStripper.
func (s *sentencePiece) StripsSpaceAfterBOS() bool { return s.prefix && s.hasBOS }
