package tokenizer

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/tandemllm/tandem/tokenid"
)

// maxHFFile bounds the JSON files LoadDir reads (Qwen3's tokenizer.json is
// 11 MB; the largest HF vocabularies are a few tens of MB).
const maxHFFile = 256 << 20

// LoadDir loads a model directory.
//
// A Hugging Face directory has tokenizer.json (byte-level BPE only: added
// tokens split first, NFC normalizer when configured, Split pre-tokenizer
// regex, ByteLevel mapping, merges by rank, ignore_merges) and optionally
// tokenizer_config.json (chat_template, eos_token, bos_token, add_bos_token,
// model_max_length), chat_template.jinja, generation_config.json (extra EOS
// ids) and config.json (max_position_embeddings, preferred for the context
// length). Without a chat template the model gets BuiltinJoin.
//
// A llama2.c directory has tokenizer.bin or a single tok*.bin; it gets
// BuiltinJoin, and its context length is read from the header of the one
// other .bin file (the checkpoint) when that header is plausible.
//
// The model is named after the directory's base name.
func LoadDir(dir string) (*Model, error) {
	name := filepath.Base(filepath.Clean(dir))
	tj := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(tj); err == nil {
		return loadHFDir(dir, name)
	}
	tb, err := findLlama2CTokenizer(dir)
	if err != nil {
		return nil, err
	}
	tok, err := LoadLlama2C(tb)
	if err != nil {
		return nil, err
	}
	tmpl, err := NewChatTemplate(BuiltinJoin, nil)
	if err != nil {
		return nil, err
	}
	return &Model{Name: name, Tokenizer: tok, Template: tmpl, ContextLength: llama2CContext(dir, tb, tok.VocabSize())}, nil
}

func findLlama2CTokenizer(dir string) (string, error) {
	p := filepath.Join(dir, "tokenizer.bin")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	matches, err := filepath.Glob(filepath.Join(dir, "tok*.bin"))
	if err != nil {
		return "", fmt.Errorf("load %s: %w", dir, err)
	}
	switch len(matches) {
	case 0:
		if _, err := os.Stat(dir); err != nil {
			return "", fmt.Errorf("load model dir: %w", err)
		}
		return "", fmt.Errorf("load %s: no tokenizer.json, tokenizer.bin or tok*.bin; %s", dir, Llama2CTokenizerHint)
	case 1:
		return matches[0], nil
	}
	return "", fmt.Errorf("load %s: several llama2.c tokenizers (%s); keep one or name it tokenizer.bin", dir, strings.Join(matches, ", "))
}

// llama2CContext reads seq_len from a llama2.c checkpoint header (7 int32:
// dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a
// negative vocab_size means an untied classifier). It returns 0 unless there
// is exactly one candidate and it matches the tokenizer's vocabulary.
func llama2CContext(dir, tokPath string, vocab int) int {
	bins, _ := filepath.Glob(filepath.Join(dir, "*.bin"))
	var model string
	for _, b := range bins {
		if b == tokPath {
			continue
		}
		if model != "" {
			return 0
		}
		model = b
	}
	if model == "" {
		return 0
	}
	f, err := os.Open(model)
	if err != nil {
		return 0
	}
	defer f.Close()
	var h [7]int32
	if err := binary.Read(f, binary.LittleEndian, &h); err != nil {
		return 0
	}
	for i, v := range h {
		if i != 5 && v <= 0 {
			return 0
		}
	}
	if v := h[5]; v != int32(vocab) && v != -int32(vocab) || h[6] > 1<<24 {
		return 0
	}
	return int(h[6])
}

// hfTokenizerFile is the part of tokenizer.json this package understands.
type hfTokenizerFile struct {
	AddedTokens []struct {
		ID         *int   `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         struct {
		Type                    string          `json:"type"`
		Vocab                   map[string]int  `json:"vocab"`
		Merges                  json.RawMessage `json:"merges"`
		IgnoreMerges            bool            `json:"ignore_merges"`
		ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	} `json:"model"`
}

// hfComponent is one normalizer / pre-tokenizer / decoder / post-processor
// object; Sequence types nest others.
type hfComponent struct {
	Type          string          `json:"type"`
	Normalizers   []hfComponent   `json:"normalizers"`
	Pretokenizers []hfComponent   `json:"pretokenizers"`
	Decoders      []hfComponent   `json:"decoders"`
	Processors    []hfComponent   `json:"processors"`
	Pattern       json.RawMessage `json:"pattern"`
	Behavior      string          `json:"behavior"`
	Invert        bool            `json:"invert"`
	AddPrefix     bool            `json:"add_prefix_space"`
	UseRegex      *bool           `json:"use_regex"`
	Single        []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int `json:"ids"`
	} `json:"special_tokens"`
}

func (c *hfComponent) flatten() []hfComponent {
	if c.Type != "Sequence" {
		return []hfComponent{*c}
	}
	var out []hfComponent
	for _, list := range [][]hfComponent{c.Normalizers, c.Pretokenizers, c.Decoders, c.Processors} {
		for i := range list {
			out = append(out, list[i].flatten()...)
		}
	}
	return out
}

func parseComponent(raw json.RawMessage) (*hfComponent, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// hfConfigFile is the part of tokenizer_config.json used here.
type hfConfigFile struct {
	ChatTemplate   json.RawMessage `json:"chat_template"`
	BOSToken       json.RawMessage `json:"bos_token"`
	EOSToken       json.RawMessage `json:"eos_token"`
	UnkToken       json.RawMessage `json:"unk_token"`
	PadToken       json.RawMessage `json:"pad_token"`
	AddBOSToken    *bool           `json:"add_bos_token"`
	ModelMaxLength *float64        `json:"model_max_length"`
}

// tokenString reads a special-token field, which HF writes either as a
// string or as an AddedToken object.
func tokenString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &o) == nil {
		return o.Content
	}
	return ""
}

func readJSONFile(path string, v any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxHFFile+1))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxHFFile {
		return fmt.Errorf("%s: larger than %d bytes", path, maxHFFile)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func loadHFDir(dir, name string) (*Model, error) {
	var cfg hfConfigFile
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	if err := readJSONFile(cfgPath, &cfg); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("load %s: %w", name, err)
	}
	tjPath := filepath.Join(dir, "tokenizer.json")
	var tf hfTokenizerFile
	if err := readJSONFile(tjPath, &tf); err != nil {
		return nil, fmt.Errorf("load %s: %w", name, err)
	}
	var gen struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	_ = readJSONFile(filepath.Join(dir, "generation_config.json"), &gen)
	var mc struct {
		MaxPos int `json:"max_position_embeddings"`
	}
	_ = readJSONFile(filepath.Join(dir, "config.json"), &mc)

	tok, err := buildHF(&tf, &cfg, gen.EOS)
	if err != nil {
		return nil, fmt.Errorf("load %s: %s: %w", name, tjPath, err)
	}

	src, origin, err := chatTemplateSource(dir, cfg.ChatTemplate)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", name, err)
	}
	specials := map[string]string{}
	for k, raw := range map[string]json.RawMessage{"bos_token": cfg.BOSToken, "eos_token": cfg.EOSToken, "unk_token": cfg.UnkToken, "pad_token": cfg.PadToken} {
		if s := tokenString(raw); s != "" {
			specials[k] = s
		}
	}
	if src == "" {
		src, origin = BuiltinJoin, "BuiltinJoin"
	}
	tmpl, err := NewChatTemplate(src, specials)
	if err != nil {
		return nil, fmt.Errorf("load %s: %s: %w", name, origin, err)
	}
	ctx := 0
	switch {
	case mc.MaxPos > 0:
		ctx = mc.MaxPos
	case cfg.ModelMaxLength != nil && *cfg.ModelMaxLength > 0 && *cfg.ModelMaxLength <= 1<<24:
		// HF writes 1e30 when unknown; only plausible lengths count.
		ctx = int(*cfg.ModelMaxLength)
	}
	return &Model{Name: name, Tokenizer: tok, Template: tmpl, ContextLength: ctx}, nil
}

// chatTemplateSource finds the chat template: tokenizer_config.json's
// chat_template (a string, or a list of named templates of which "default"
// is used), else chat_template.jinja, else chat_template.json.
func chatTemplateSource(dir string, raw json.RawMessage) (src, origin string, err error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s, cfgPath, nil
		}
		var named []struct {
			Name     string `json:"name"`
			Template string `json:"template"`
		}
		if err := json.Unmarshal(raw, &named); err != nil {
			return "", "", fmt.Errorf("%s: chat_template is neither a string nor a list of named templates: %w", cfgPath, err)
		}
		for _, n := range named {
			if n.Name == "default" {
				return n.Template, cfgPath, nil
			}
		}
		if len(named) > 0 {
			return named[0].Template, cfgPath, nil
		}
	}
	jinjaPath := filepath.Join(dir, "chat_template.jinja")
	if b, err := os.ReadFile(jinjaPath); err == nil {
		return string(b), jinjaPath, nil
	}
	jsonPath := filepath.Join(dir, "chat_template.json")
	var ct struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := readJSONFile(jsonPath, &ct); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", "", err
	}
	return ct.ChatTemplate, jsonPath, nil
}

// ParseTokenizerJSON builds a tokenizer from the bytes of a tokenizer.json
// (with no tokenizer_config.json: EOS and BOS come only from the
// post-processor and well-known end tokens).
func ParseTokenizerJSON(data []byte) (Tokenizer, error) {
	var tf hfTokenizerFile
	if err := json.Unmarshal(data, &tf); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	t, err := buildHF(&tf, &hfConfigFile{}, nil)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	return t, nil
}

// maxIDSlack bounds ids beyond the number of entries, so a corrupt id does
// not make us allocate gigabytes.
const maxIDSlack = 1 << 16

func buildHF(tf *hfTokenizerFile, cfg *hfConfigFile, genEOS json.RawMessage) (*byteLevel, error) {
	m := &tf.Model
	if m.Type != "" && m.Type != "BPE" {
		return nil, fmt.Errorf("model type %q is not supported (only byte-level BPE)", m.Type)
	}
	if len(m.Vocab) == 0 {
		return nil, errors.New("model.vocab is empty")
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" || m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, errors.New("continuing_subword_prefix / end_of_word_suffix are not supported")
	}

	// Normalizer: none, or NFC.
	nfc := false
	norm, err := parseComponent(tf.Normalizer)
	if err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	if norm != nil {
		for _, c := range norm.flatten() {
			if c.Type != "NFC" {
				return nil, fmt.Errorf("normalizer %q is not supported", c.Type)
			}
			nfc = true
		}
	}

	// Pre-tokenizer: ByteLevel, optionally after one Split.
	pre, err := parseComponent(tf.PreTokenizer)
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if pre == nil {
		return nil, errors.New("no pre_tokenizer: only byte-level BPE (ByteLevel pre-tokenizer) is supported")
	}
	pattern, byteLevelSeen, prefixSpace := "", false, false
	for _, c := range pre.flatten() {
		switch c.Type {
		case "Split":
			if pattern != "" {
				return nil, errors.New("more than one Split pre-tokenizer is not supported")
			}
			if c.Invert || (c.Behavior != "Isolated" && c.Behavior != "") {
				return nil, fmt.Errorf("Split behavior %q (invert=%v) is not supported, only Isolated", c.Behavior, c.Invert)
			}
			var p struct {
				Regex  *string `json:"Regex"`
				String *string `json:"String"`
			}
			if err := json.Unmarshal(c.Pattern, &p); err != nil {
				return nil, fmt.Errorf("Split pattern: %w", err)
			}
			switch {
			case p.Regex != nil && *p.Regex != "":
				pattern = *p.Regex
			case p.String != nil && *p.String != "":
				pattern = regexp.QuoteMeta(*p.String)
			default:
				return nil, errors.New("Split pattern is empty")
			}
		case "ByteLevel":
			byteLevelSeen = true
			prefixSpace = c.AddPrefix
			if c.UseRegex == nil || *c.UseRegex {
				if pattern != "" {
					return nil, errors.New("Split followed by ByteLevel(use_regex=true) is not supported")
				}
				pattern = PatternGPT2
			}
		default:
			return nil, fmt.Errorf("pre-tokenizer %q is not supported", c.Type)
		}
	}
	if !byteLevelSeen {
		return nil, errors.New("pre_tokenizer has no ByteLevel step: only byte-level BPE is supported")
	}
	if dec, err := parseComponent(tf.Decoder); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	} else if dec != nil {
		for _, c := range dec.flatten() {
			if c.Type != "ByteLevel" {
				return nil, fmt.Errorf("decoder %q is not supported", c.Type)
			}
		}
	}

	// Vocabulary, un-mapped from GPT-2's byte alphabet.
	nEntries := len(m.Vocab) + len(tf.AddedTokens)
	limit := min(nEntries+maxIDSlack, 1<<24)
	size := 0
	for s, id := range m.Vocab {
		if id < 0 || id >= limit {
			return nil, fmt.Errorf("vocab entry %q has id %d out of range", s, id)
		}
		size = max(size, id+1)
	}
	for i, a := range tf.AddedTokens {
		if a.ID == nil || *a.ID < 0 || *a.ID >= limit {
			return nil, fmt.Errorf("added_tokens[%d] %q has a missing or out-of-range id", i, a.Content)
		}
		size = max(size, *a.ID+1)
	}
	un := newByteUnmapper()
	tokens := make([]string, size)
	present := make([]bool, size)
	vocab := make(map[string]int, len(m.Vocab))
	for s, id := range m.Vocab {
		raw, _ := un.unmap(s)
		if present[id] {
			return nil, fmt.Errorf("vocab id %d is used by two tokens", id)
		}
		tokens[id], present[id] = raw, true
		// Two spellings can only share raw bytes when one is not in the
		// byte alphabet; keep the lower id so every load agrees.
		if prev, dup := vocab[raw]; !dup || id < prev {
			vocab[raw] = id
		}
	}

	// Merges: "a b" strings (older files) or ["a", "b"] pairs. One decode
	// of the right shape: 150k per-item decodes would double the load time.
	var merges [][2]int32
	if raw := bytes.TrimSpace(m.Merges); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		var pairs [][]string
		if inner := bytes.TrimSpace(bytes.TrimPrefix(raw, []byte("["))); len(inner) > 0 && inner[0] == '"' {
			var list []string
			if err := json.Unmarshal(raw, &list); err != nil {
				return nil, fmt.Errorf("model.merges: %w", err)
			}
			pairs = make([][]string, len(list))
			for i, s := range list {
				a, b, ok := strings.Cut(s, " ")
				if !ok {
					return nil, fmt.Errorf("model.merges[%d] %q is not two tokens", i, s)
				}
				pairs[i] = []string{a, b}
			}
		} else if err := json.Unmarshal(raw, &pairs); err != nil {
			return nil, fmt.Errorf("model.merges: %w", err)
		}
		merges = make([][2]int32, 0, len(pairs))
		for i, p := range pairs {
			if len(p) != 2 {
				return nil, fmt.Errorf("model.merges[%d] is not a pair of tokens", i)
			}
			ia, oka := m.Vocab[p[0]]
			ib, okb := m.Vocab[p[1]]
			if !oka || !okb {
				return nil, fmt.Errorf("model.merges[%d] (%q %q) uses a token missing from the vocab", i, p[0], p[1])
			}
			merges = append(merges, [2]int32{int32(ia), int32(ib)})
		}
	}
	if merges == nil {
		merges = [][2]int32{} // non-nil: HF merge rule, even with no merges
	}

	var added []AddedToken
	for _, a := range tf.AddedTokens {
		added = append(added, AddedToken{ID: tokenid.ID(*a.ID), Content: a.Content, Special: a.Special, LStrip: a.LStrip, RStrip: a.RStrip})
	}
	lookup := func(content string) (tokenid.ID, bool) {
		for _, a := range added {
			if a.Content == content {
				return a.ID, true
			}
		}
		if id, ok := m.Vocab[content]; ok {
			return tokenid.ID(id), true
		}
		return -1, false
	}

	// EOS: eos_token, generation_config's ids, and <|endoftext|> when it is
	// a special token (Qwen's and GPT's document end, which base and chat
	// models alike emit).
	var eos []tokenid.ID
	addEOS := func(id tokenid.ID) {
		for _, e := range eos {
			if e == id {
				return
			}
		}
		eos = append(eos, id)
	}
	if s := tokenString(cfg.EOSToken); s != "" {
		if id, ok := lookup(s); ok {
			addEOS(id)
		}
	}
	if len(genEOS) > 0 {
		var one int
		var many []int
		if json.Unmarshal(genEOS, &one) == nil {
			many = []int{one}
		} else {
			_ = json.Unmarshal(genEOS, &many)
		}
		for _, id := range many {
			if id >= 0 && id < size {
				addEOS(tokenid.ID(id))
			}
		}
	}
	for _, a := range added {
		if a.Content == "<|endoftext|>" && a.Special {
			addEOS(a.ID)
		}
	}

	// BOS: the post-processor's leading special token (Llama 3 style), else
	// bos_token with add_bos_token.
	bos, addBOS := tokenid.ID(-1), false
	if s := tokenString(cfg.BOSToken); s != "" {
		if id, ok := lookup(s); ok {
			bos = id
			addBOS = cfg.AddBOSToken != nil && *cfg.AddBOSToken
		}
	}
	if post, err := parseComponent(tf.PostProcessor); err == nil && post != nil {
		for _, c := range post.flatten() {
			if c.Type != "TemplateProcessing" || len(c.Single) == 0 || c.Single[0].SpecialToken == nil {
				continue
			}
			if st, ok := c.SpecialTokens[c.Single[0].SpecialToken.ID]; ok && len(st.IDs) == 1 && st.IDs[0] >= 0 && st.IDs[0] < size {
				bos, addBOS = tokenid.ID(st.IDs[0]), true
			}
		}
	}

	return newByteLevel(byteLevelConfig{
		kind:         "hf-bpe",
		tokens:       tokens,
		present:      present,
		vocab:        vocab,
		merges:       merges,
		ignoreMerges: m.IgnoreMerges,
		pattern:      pattern,
		nfc:          nfc,
		prefixSpace:  prefixSpace,
		added:        added,
		eos:          eos,
		bos:          bos,
		addBOS:       addBOS,
	})
}

// NewByteLevelBPE builds a tokenizer from a llama.cpp "gpt2" vocabulary
// (GGUF tokenizer.ggml.tokens in GPT-2's byte alphabet, merges as "a b",
// control/user-defined tokens as added). pre is llama.cpp's
// tokenizer.ggml.pre name ("qwen2", "llama-bpe", "gpt-2", "o200k") or a split
// regex. NFC is applied for the Qwen names, whose HF tokenizer.json has it.
// No EOS or BOS is set; use WithSpecials for those.
func NewByteLevelBPE(vocab []string, merges []string, added []AddedToken, pre string) (Tokenizer, error) {
	pattern, known := patternForName(pre)
	if !known {
		pattern = pre
	}
	un := newByteUnmapper()
	tokens := make([]string, len(vocab))
	present := make([]bool, len(vocab))
	raw := make(map[string]int, len(vocab))
	byAlphabet := make(map[string]int, len(vocab))
	for i, s := range vocab {
		r, _ := un.unmap(s)
		tokens[i], present[i] = r, true
		if _, dup := raw[r]; !dup {
			raw[r] = i
		}
		if _, dup := byAlphabet[s]; !dup {
			byAlphabet[s] = i
		}
	}
	for _, a := range added {
		if a.ID < 0 || int(a.ID) >= len(vocab) {
			return nil, fmt.Errorf("added token %q: id %d outside the vocabulary (size %d)", a.Content, a.ID, len(vocab))
		}
	}
	pairs := make([][2]int32, 0, len(merges))
	for i, mg := range merges {
		a, b, ok := strings.Cut(mg, " ")
		ia, oka := byAlphabet[a]
		ib, okb := byAlphabet[b]
		if !ok || !oka || !okb {
			return nil, fmt.Errorf("merge %d %q: not two vocabulary tokens", i, mg)
		}
		pairs = append(pairs, [2]int32{int32(ia), int32(ib)})
	}
	t, err := newByteLevel(byteLevelConfig{
		kind:    "gguf-gpt2",
		tokens:  tokens,
		present: present,
		vocab:   raw,
		merges:  pairs,
		pattern: pattern,
		nfc:     known && pattern == PatternQwen2,
		added:   append([]AddedToken(nil), added...),
		bos:     -1,
	})
	if err != nil {
		return nil, fmt.Errorf("byte-level BPE: %w", err)
	}
	return t, nil
}
