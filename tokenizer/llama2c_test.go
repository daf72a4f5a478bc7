package tokenizer

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/tokenid"
)

func TestLlama2CEncode(t *testing.T) {
	tok := testStories(t)
	tests := []struct {
		text string
		want []tokenid.ID
	}{
		{"Once upon a time", []tokenid.ID{403, 407, 261, 378}},
		{"", nil},
	}
	for _, tt := range tests {
		if got := tok.Encode(tt.text); !slices.Equal(got, tt.want) {
			t.Errorf("Encode(%q) = %v, want %v", tt.text, got, tt.want)
		}
	}
	if bos, ok := tok.BOS(); bos != 1 || !ok {
		t.Errorf("BOS = %d, %v", bos, ok)
	}
	if got := tok.EOS(); !slices.Equal(got, []tokenid.ID{2}) {
		t.Errorf("EOS = %v", got)
	}
	if tok.VocabSize() != 512 {
		t.Errorf("VocabSize = %d", tok.VocabSize())
	}
}

// TestLlama2CGolden round-trips llama2.c's reference outputs: the text after
// BOS encodes (with the dummy prefix) and decodes back byte for byte, both in
// one go and streamed.
func TestLlama2CGolden(t *testing.T) {
	dir := storiesDir(t)
	tok := testStories(t)
	for _, name := range []string{"golden-once-upon-a-time.txt", "golden-lily-and-tom.txt"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			text := string(data)
			ids := append([]tokenid.ID{1}, tok.Encode(text)...)
			if got := tok.Decode(ids); got != text {
				t.Fatalf("Decode(BOS+Encode) = %q, want %q", got, text)
			}
			// Without BOS the dummy-prefix space stays, as in llama2.c.
			if got := tok.Decode(ids[1:]); got != " "+text {
				t.Errorf("Decode without BOS = %q", got)
			}
			d := NewDetokenizer(tok)
			var sb strings.Builder
			for _, id := range ids {
				sb.WriteString(d.Add(id))
			}
			sb.WriteString(d.Flush())
			if sb.String() != text {
				t.Errorf("streamed %q", sb.String())
			}
			// A stream of generated tokens that follows a BOS-only prompt.
			d = NewDetokenizer(tok, After(1))
			if got := d.Add(ids[1:]...) + d.Flush(); got != text {
				t.Errorf("After(BOS) streamed %q", got)
			}
		})
	}
}

func TestLlama2CByteFallback(t *testing.T) {
	tok := testStories(t)
	for _, text := range []string{"naïve café", "emoji 🎉 and 中文", "tab\there\nnewline", "\x00"} {
		ids := tok.Encode(text)
		if got := tok.Decode(append([]tokenid.ID{1}, ids...)); got != text {
			t.Errorf("round trip %q -> %v -> %q", text, ids, got)
		}
	}
	// '中' is not in the 512-piece vocabulary, so after the dummy-prefix
	// space (id 410) it falls back to its UTF-8 bytes E4 B8 AD, i.e. ids
	// 3+0xE4, 3+0xB8, 3+0xAD.
	if got, want := tok.Encode("中"), []tokenid.ID{410, 3 + 0xE4, 3 + 0xB8, 3 + 0xAD}; !slices.Equal(got, want) {
		t.Errorf("Encode(中) = %v, want %v", got, want)
	}
	// Control tokens render as nothing, and BOS/EOS are special.
	if got := tok.Decode([]tokenid.ID{1, 2, 0}); got != "<unk>" {
		t.Errorf("Decode(BOS, EOS, UNK) = %q", got)
	}
	if !IsSpecial(tok, 1) || !IsSpecial(tok, 2) || IsSpecial(tok, 403) {
		t.Error("IsSpecial wrong for BOS/EOS/normal")
	}
	// llama2.c does not parse special tokens out of text.
	if got := tok.Encode("\n<s>\n"); slices.Contains(got, 1) {
		t.Errorf("llama2.c recognized a literal BOS: %v", got)
	}
}

func TestLoadDirLlama2C(t *testing.T) {
	dir := storiesDir(t)
	m, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "stories260K" || m.ContextLength != 512 {
		t.Errorf("Name %q ContextLength %d, want stories260K 512", m.Name, m.ContextLength)
	}
	got, err := m.Template.Render(ChatInput{Messages: []byte(`[{"role":"system","content":"Once upon"},{"role":"user","content":"a time"}]`), AddGenerationPrompt: true})
	if err != nil || got != "Once upon\na time" {
		t.Errorf("Render = %q, %v", got, err)
	}
	if m.Tokenizer.Fingerprint() != testStories(t).Fingerprint() {
		t.Error("fingerprint differs between two loads of one file")
	}
}

// llama2CFile writes a llama2.c tokenizer in memory.
func llama2CFile(maxLen int32, pieces []string, scores []float32) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, maxLen)
	for i, p := range pieces {
		binary.Write(&b, binary.LittleEndian, scores[i])
		binary.Write(&b, binary.LittleEndian, int32(len(p)))
		b.WriteString(p)
	}
	return b.Bytes()
}

func TestLoadLlama2CCorrupt(t *testing.T) {
	good := llama2CFile(5, []string{"<unk>", "<s>", "</s>", "a", "b", " ", "ab", " ab"}, []float32{0, 0, 0, -1, -2, -3, -4, -5})
	negLen := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(negLen[4+4:], math.MaxUint32) // first length = -1
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "truncated"},
		{"short-header", []byte{1, 0}, "truncated"},
		{"zero-max", []byte{0, 0, 0, 0}, "max_token_length"},
		{"huge-max", []byte{0xff, 0xff, 0xff, 0x7f}, "max_token_length"},
		{"no-tokens", []byte{7, 0, 0, 0}, "only 0 tokens"},
		{"truncated-header", good[:len(good)-9], "truncated"},
		{"truncated-piece", good[:len(good)-1], "truncated"},
		{"negative-length", negLen, "length -1"},
		{"too-long-piece", llama2CFile(5, []string{"<unk>", "<s>", "</s>", "abcdef"}, []float32{0, 0, 0, 0}), "length 6"},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".bin")
			if err := os.WriteFile(path, tt.data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadLlama2C(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("err = %v; want it to name %s and say %q", err, path, tt.want)
			}
		})
	}
	path := filepath.Join(dir, "good.bin")
	os.WriteFile(path, good, 0o644)
	tok, err := LoadLlama2C(path)
	if err != nil {
		t.Fatal(err)
	}
	// " ab" is reached by merging 'a'+'b', then ' '+"ab"; "c" is in no
	// piece and there are no byte pieces, so it becomes <unk>.
	if got := tok.Encode("ab"); !slices.Equal(got, []tokenid.ID{7}) {
		t.Errorf("Encode(ab) = %v", got)
	}
	if got := tok.Encode("abc"); !slices.Equal(got, []tokenid.ID{7, 0}) {
		t.Errorf("Encode(abc) = %v", got)
	}
	if _, err := LoadLlama2C(filepath.Join(dir, "missing.bin")); err == nil || !strings.Contains(err.Error(), "missing.bin") {
		t.Errorf("missing file: %v", err)
	}
}

// TestSentencePieceGGUFStyle builds the stories vocabulary the way a GGUF
// file carries it ('▁' for spaces, token types) and checks it tokenizes like
// the llama2.c loader, plus literal control tokens.
func TestSentencePieceGGUFStyle(t *testing.T) {
	ref := testStories(t).(*sentencePiece)
	n := ref.VocabSize()
	pieces := make([]string, n)
	scores := make([]float32, n)
	types := make([]int32, n)
	data, _ := os.ReadFile(filepath.Join(storiesDir(t), "tok512.bin"))
	p := 4
	for i := 0; i < n; i++ {
		scores[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[p:]))
		l := int(binary.LittleEndian.Uint32(data[p+4:]))
		pieces[i] = strings.ReplaceAll(string(data[p+8:p+8+l]), " ", "▁")
		p += 8 + l
		switch {
		case i == 0:
			types[i] = TypeUnknown
		case i <= 2:
			types[i] = TypeControl
		case i <= 258:
			types[i] = TypeByte
		default:
			types[i] = TypeNormal
		}
	}
	pieces[1], pieces[2] = "<s>", "</s>"
	tok, err := NewSentencePieceBPE(pieces, scores, types, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"Once upon a time", "Lily and Tom went to the park.", "naïve 🎉"} {
		if got, want := tok.Encode(text), ref.Encode(text); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, llama2.c loader %v", text, got, want)
		}
	}
	// Literal control tokens are recognized; a dummy prefix follows them.
	got := tok.Encode("<s>Once</s>")
	if want := []tokenid.ID{1, 403, 2}; !slices.Equal(got, want) {
		t.Errorf("Encode(<s>Once</s>) = %v, want %v", got, want)
	}
	// types == nil infers the same roles.
	tok2, err := NewSentencePieceBPE(pieces, scores, nil, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if tok2.Fingerprint() != tok.Fingerprint() {
		t.Error("inferred token types differ from explicit ones")
	}
	for _, bad := range []struct {
		name   string
		pieces []string
		scores []float32
		types  []int32
		bos    tokenid.ID
	}{
		{"empty", nil, nil, nil, -1},
		{"scores", []string{"a"}, nil, nil, -1},
		{"types", []string{"a"}, []float32{0}, []int32{1, 1}, -1},
		{"bos", []string{"a"}, []float32{0}, nil, 5},
		{"byte", []string{"a"}, []float32{0}, []int32{TypeByte}, -1},
	} {
		if _, err := NewSentencePieceBPE(bad.pieces, bad.scores, bad.types, bad.bos, -1); err == nil {
			t.Errorf("%s: no error", bad.name)
		}
	}
	// WithSpecials changes EOS/BOS and the fingerprint, not the ids.
	w, err := WithSpecials(tok, []tokenid.ID{2, 0}, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := w.BOS(); ok || !slices.Equal(w.EOS(), []tokenid.ID{2, 0}) || w.Fingerprint() == tok.Fingerprint() {
		t.Errorf("WithSpecials: BOS ok=%v EOS %v", ok, w.EOS())
	}
	if _, ok := tok.BOS(); !ok {
		t.Error("WithSpecials modified its input")
	}
}
