package native

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tandemllm/tandem/engine/native/model"
	"github.com/tandemllm/tandem/tokenizer"
)

// maxVocabFile bounds a tokenizer file read whole (Qwen3's tokenizer.json
// is 11 MB).
const maxVocabFile = 256 << 20

// VocabFromFile reads a tokenizer as the GGUF vocabulary llama.cpp's
// converters would write for it (tokenizer.ggml.*), so `tandem model gen
// --tokenizer` and `tandem model quantize` produce files llama.cpp
// tokenizes identically:
//   - a Hugging Face tokenizer.json (or a directory holding one, with its
//     tokenizer_config.json for BOS/EOS): byte-level BPE, "gpt2";
//   - a SentencePiece tokenizer.model: "llama";
//   - a llama2.c tokenizer .bin (tok512.bin): "llama", with the token types
//     llama.cpp's SentencePiece vocabulary needs (byte pieces are type 6).
func VocabFromFile(path string) (*model.Vocab, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		path = filepath.Join(path, "tokenizer.json")
	}
	b, err := readBounded(path, maxVocabFile)
	if err != nil {
		return nil, err
	}
	var v *model.Vocab
	switch {
	case strings.HasSuffix(path, ".json"):
		v, err = hfVocab(b, filepath.Dir(path))
	case strings.HasSuffix(path, ".model"):
		v, err = sentencePieceVocab(b)
	default:
		// The tokenizer package's parser checks every length first.
		if _, err = tokenizer.LoadLlama2C(path); err == nil {
			v = llama2cVocab(b)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	return v, nil
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a tokenizer may have", path, st.Size(), limit)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// PadVocab extends v to n tokens with "[PAD<i>]" pieces of type unused,
// as llama.cpp's convert_hf_to_gguf.py does when a model's embedding has
// more rows than its tokenizer has tokens (Qwen3: 151,936 rows, 151,669
// tokens): llama.cpp requires one token per embedding row.
func PadVocab(v *model.Vocab, n int) {
	for i := len(v.Tokens); i < n; i++ {
		v.Tokens = append(v.Tokens, fmt.Sprintf("[PAD%d]", i))
		if v.Scores != nil {
			v.Scores = append(v.Scores, 0)
		}
		if v.Types != nil {
			v.Types = append(v.Types, tokenizer.TypeUnused)
		}
	}
}

func hfVocab(raw []byte, dir string) (*model.Vocab, error) {
	var tj struct {
		Model struct {
			Type   string            `json:"type"`
			Vocab  map[string]int32  `json:"vocab"`
			Merges []json.RawMessage `json:"merges"`
		} `json:"model"`
		Added []struct {
			ID      int32  `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(raw, &tj); err != nil {
		return nil, err
	}
	if tj.Model.Type != "BPE" {
		return nil, fmt.Errorf("model type %q: only byte-level BPE tokenizer.json is supported", tj.Model.Type)
	}
	n := int32(0)
	for _, id := range tj.Model.Vocab {
		if id < 0 || id >= 1<<24 {
			return nil, fmt.Errorf("token id %d out of range", id)
		}
		n = max(n, id+1)
	}
	for _, a := range tj.Added {
		if a.ID < 0 || a.ID >= 1<<24 {
			return nil, fmt.Errorf("added token id %d out of range", a.ID)
		}
		n = max(n, a.ID+1)
	}
	// The pre-tokenizer name llama.cpp keys its split regex on
	// (tokenizer.ggml.pre): Llama 3's splits digits in runs of three,
	// Qwen2's one by one.
	pre := "qwen2"
	if strings.Contains(string(raw), `\\p{N}{1,3}`) {
		pre = "llama-bpe"
	}
	v := &model.Vocab{Model: "gpt2", Pre: pre, Tokens: make([]string, n), Types: make([]int32, n), BOS: -1, EOS: -1}
	for i := range v.Tokens {
		v.Tokens[i], v.Types[i] = fmt.Sprintf("[PAD%d]", i), tokenizer.TypeUnused
	}
	for tok, id := range tj.Model.Vocab {
		v.Tokens[id], v.Types[id] = tok, tokenizer.TypeNormal
	}
	byContent := map[string]int32{}
	for _, a := range tj.Added {
		v.Tokens[a.ID], v.Types[a.ID] = a.Content, tokenizer.TypeUserDefined
		if a.Special {
			v.Types[a.ID] = tokenizer.TypeControl
		}
		byContent[a.Content] = a.ID
	}
	for _, m := range tj.Model.Merges {
		var s string
		if json.Unmarshal(m, &s) != nil {
			var pair []string
			if err := json.Unmarshal(m, &pair); err != nil || len(pair) != 2 {
				return nil, fmt.Errorf("merge %s is neither \"a b\" nor [a, b]", m)
			}
			s = pair[0] + " " + pair[1]
		}
		v.Merges = append(v.Merges, s)
	}
	// BOS/EOS as transformers reads them from tokenizer_config.json; the
	// token may be a string or {"content": ...}.
	if cb, err := readBounded(filepath.Join(dir, "tokenizer_config.json"), 64<<20); err == nil {
		var tc map[string]json.RawMessage
		if err := json.Unmarshal(cb, &tc); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
		tokenOf := func(key string) int32 {
			var s string
			if json.Unmarshal(tc[key], &s) != nil {
				var o struct {
					Content string `json:"content"`
				}
				_ = json.Unmarshal(tc[key], &o)
				s = o.Content
			}
			if id, ok := byContent[s]; ok && s != "" {
				return id
			}
			return -1
		}
		v.BOS, v.EOS = tokenOf("bos_token"), tokenOf("eos_token")
		var add bool
		if json.Unmarshal(tc["add_bos_token"], &add) == nil {
			v.AddBOS = add && v.BOS >= 0
		}
	}
	// The chat template travels with the vocabulary (GGUF
	// tokenizer.chat_template), as convert_hf_to_gguf.py carries it.
	tmpl, err := tokenizer.ChatTemplateOf(dir)
	if err != nil {
		return nil, err
	}
	v.ChatTemplate = tmpl
	return v, nil
}

// sentencePieceVocab decodes a SentencePiece ModelProto (sentencepiece_model.proto
// in https://github.com/google/sentencepiece: field 1 is the repeated
// SentencePiece {1: piece, 2: score, 3: type}), the tokenizer.model of
// Llama 1/2 and Mistral. The piece types are the GGUF token types.
func sentencePieceVocab(b []byte) (*model.Vocab, error) {
	v := &model.Vocab{Model: "llama", BOS: -1, EOS: -1, AddBOS: true}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("model proto: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, fmt.Errorf("model proto field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		msg, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, fmt.Errorf("piece %d: %w", len(v.Tokens), protowire.ParseError(n))
		}
		b = b[n:]
		piece, score, ptype := "", float32(0), int32(tokenizer.TypeNormal)
		for len(msg) > 0 {
			f, ft, k := protowire.ConsumeTag(msg)
			if k < 0 {
				return nil, fmt.Errorf("piece %d: %w", len(v.Tokens), protowire.ParseError(k))
			}
			msg = msg[k:]
			switch {
			case f == 1 && ft == protowire.BytesType:
				s, k2 := protowire.ConsumeBytes(msg)
				if k2 < 0 {
					return nil, fmt.Errorf("piece %d text: %w", len(v.Tokens), protowire.ParseError(k2))
				}
				piece, k = string(s), k2
			case f == 2 && ft == protowire.Fixed32Type:
				u, k2 := protowire.ConsumeFixed32(msg)
				if k2 < 0 {
					return nil, fmt.Errorf("piece %d score: %w", len(v.Tokens), protowire.ParseError(k2))
				}
				score, k = math.Float32frombits(u), k2
			case f == 3 && ft == protowire.VarintType:
				u, k2 := protowire.ConsumeVarint(msg)
				if k2 < 0 || u > 6 {
					return nil, fmt.Errorf("piece %d has a bad type", len(v.Tokens))
				}
				ptype, k = int32(u), k2
			default:
				k = protowire.ConsumeFieldValue(f, ft, msg)
				if k < 0 {
					return nil, fmt.Errorf("piece %d field %d: %w", len(v.Tokens), f, protowire.ParseError(k))
				}
			}
			msg = msg[k:]
		}
		if len(v.Tokens) >= 1<<24 {
			return nil, errors.New("more than 2^24 pieces")
		}
		switch {
		case piece == "<s>" && ptype == tokenizer.TypeControl:
			v.BOS = int32(len(v.Tokens))
		case piece == "</s>" && ptype == tokenizer.TypeControl:
			v.EOS = int32(len(v.Tokens))
		}
		v.Tokens = append(v.Tokens, piece)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, ptype)
	}
	if len(v.Tokens) == 0 {
		return nil, errors.New("no pieces (not a SentencePiece model)")
	}
	return v, nil
}

// llama2cVocab reads a llama2.c tokenizer (tok512.bin) as a GGUF "llama"
// vocabulary: spaces become '▁' as SentencePiece stores them, <unk> is
// type unknown, BOS/EOS control, <0xXX> byte pieces type byte (llama.cpp
// decodes byte fallback only from type-6 pieces).
func llama2cVocab(b []byte) *model.Vocab {
	v := &model.Vocab{Model: "llama", BOS: 1, EOS: 2, AddBOS: true}
	le := binary.LittleEndian
	for p := 4; p+8 <= len(b); {
		score := math.Float32frombits(le.Uint32(b[p:]))
		n := int(le.Uint32(b[p+4:]))
		p += 8
		piece := string(b[p : p+n])
		p += n
		typ := tokenizer.TypeNormal
		switch i := len(v.Tokens); {
		case i == 0:
			typ = tokenizer.TypeUnknown
		case i == 1 || i == 2:
			typ = tokenizer.TypeControl
		case len(piece) == 6 && strings.HasPrefix(piece, "<0x") && piece[5] == '>':
			typ = tokenizer.TypeByte
		}
		v.Tokens = append(v.Tokens, strings.ReplaceAll(piece, " ", "▁"))
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, typ)
	}
	return v
}
