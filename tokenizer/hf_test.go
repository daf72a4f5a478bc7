package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/tokenid"
)

// tinyTokenizerJSON builds a small GPT-2-style tokenizer.json: the 256 byte
// tokens in GPT-2's alphabet (ids = byte values), a few merges, added tokens.
func tinyTokenizerJSON(t testing.TB, edit func(m map[string]any)) []byte {
	alpha := gpt2ByteAlphabet()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(alpha[b])] = b
	}
	merges := []string{"Ġ t", "h e", "Ġt he", "l l", "he ll", "hell o"} // "hello" = 261
	for i, m := range merges {
		vocab[strings.ReplaceAll(m, " ", "")] = 256 + i
	}
	vocab["wor"] = 270 // reachable only without merges (ignore_merges)
	tj := map[string]any{
		"version": "1.0",
		"added_tokens": []any{
			map[string]any{"id": 300, "content": "<|endoftext|>", "special": true},
			map[string]any{"id": 301, "content": "<mask>", "special": true, "lstrip": true, "rstrip": true},
			map[string]any{"id": 302, "content": "<|begin|>", "special": true},
		},
		"normalizer":     nil,
		"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		"post_processor": map[string]any{"type": "ByteLevel"},
		"decoder":        map[string]any{"type": "ByteLevel"},
		"model":          map[string]any{"type": "BPE", "vocab": vocab, "merges": merges},
	}
	if edit != nil {
		edit(tj)
	}
	data, err := json.Marshal(tj)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-model")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadDirHF(t *testing.T) {
	dir := writeDir(t, map[string]string{
		"tokenizer.json": string(tinyTokenizerJSON(t, nil)),
		"tokenizer_config.json": `{"eos_token": {"content": "<mask>", "__type": "AddedToken"}, "bos_token": "<|begin|>", "add_bos_token": true,
			"model_max_length": 1e30, "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}"}]}`,
		"generation_config.json": `{"eos_token_id": [300, 5]}`,
		"config.json":            `{"max_position_embeddings": 2048}`,
	})
	m, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok := m.Tokenizer
	if m.Name != "tiny-model" || m.ContextLength != 2048 {
		t.Errorf("Name %q ContextLength %d", m.Name, m.ContextLength)
	}
	if got := tok.EOS(); !slices.Equal(got, []tokenid.ID{301, 300, 5}) {
		t.Errorf("EOS = %v", got)
	}
	if bos, ok := tok.BOS(); bos != 302 || !ok {
		t.Errorf("BOS = %d %v", bos, ok)
	}
	if got, err := m.Template.Render(ChatInput{Messages: []byte(`[{"content":"hi"}]`)}); err != nil || got != "<|begin|>hi" {
		t.Errorf("Render = %q, %v", got, err)
	}
	tests := []struct {
		text string
		want []tokenid.ID
	}{
		{" the", []tokenid.ID{258}},
		{"hello", []tokenid.ID{261}},
		{"hello world", []tokenid.ID{261, ' ', 'w', 'o', 'r', 'l', 'd'}}, // " world" has no merges: bytes
		{"a <mask>  b", []tokenid.ID{'a', 301, 'b'}},                     // lstrip/rstrip absorb the spaces
		{"<|endoftext|>x", []tokenid.ID{300, 'x'}},
	}
	for _, tt := range tests {
		if got := tok.Encode(tt.text); !slices.Equal(got, tt.want) {
			t.Errorf("Encode(%q) = %v, want %v", tt.text, got, tt.want)
		}
	}
	if tok.Decode(tok.Encode("hello world")) != "hello world" {
		t.Error("round trip")
	}
}

func TestLoadDirHFVariants(t *testing.T) {
	// ignore_merges: a whole-word vocabulary hit wins over merges.
	withIgnore := tinyTokenizerJSON(t, func(m map[string]any) { m["model"].(map[string]any)["ignore_merges"] = true })
	tok, err := ParseTokenizerJSON(withIgnore)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("wor"); !slices.Equal(got, []tokenid.ID{270}) {
		t.Errorf("ignore_merges: Encode(wor) = %v", got)
	}
	plain, _ := ParseTokenizerJSON(tinyTokenizerJSON(t, nil))
	if got := plain.Encode("wor"); !slices.Equal(got, []tokenid.ID{'w', 'o', 'r'}) {
		t.Errorf("no ignore_merges: Encode(wor) = %v", got)
	}
	if plain.Fingerprint() == tok.Fingerprint() {
		t.Error("ignore_merges does not change the fingerprint")
	}

	// Split with an unknown regex (regexp2 path), pair-form merges, NFC, and
	// a Llama-3 style TemplateProcessing BOS; chat template from a .jinja file.
	split := tinyTokenizerJSON(t, func(m map[string]any) {
		m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}}}
		m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\s?\w+|\s+|[^\s\w]+`}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
		}}
		model := m["model"].(map[string]any)
		var pairs [][]string
		for _, s := range model["merges"].([]string) {
			a, b, _ := strings.Cut(s, " ")
			pairs = append(pairs, []string{a, b})
		}
		model["merges"] = pairs
		m["post_processor"] = map[string]any{"type": "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<|begin|>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"special_tokens": map[string]any{"<|begin|>": map[string]any{"id": "<|begin|>", "ids": []int{302}, "tokens": []string{"<|begin|>"}}}}
	})
	dir := writeDir(t, map[string]string{"tokenizer.json": string(split), "chat_template.jinja": "{{ messages | length }}"})
	m, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Tokenizer.Encode(" the e\u0301"); !slices.Equal(got, []tokenid.ID{258, ' ', 0xC3, 0xA9}) {
		t.Errorf("Encode = %v", got)
	}
	if bos, ok := m.Tokenizer.BOS(); bos != 302 || !ok {
		t.Errorf("BOS = %d %v", bos, ok)
	}
	if got, _ := m.Template.Render(ChatInput{Messages: []byte(`[{},{}]`)}); got != "2" {
		t.Errorf("chat_template.jinja: %q", got)
	}
	if m.ContextLength != 0 {
		t.Errorf("ContextLength = %d, want 0 (unknown)", m.ContextLength)
	}

	// No template anywhere: BuiltinJoin.
	dir = writeDir(t, map[string]string{"tokenizer.json": string(tinyTokenizerJSON(t, nil))})
	m, err = LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Template.Render(ChatInput{Messages: []byte(`[{"content":"a"},{"content":"b"}]`)}); got != "a\nb" {
		t.Errorf("default template: %q", got)
	}
}

func TestLoadDirErrors(t *testing.T) {
	edit := func(f func(m map[string]any)) string { return string(tinyTokenizerJSON(t, f)) }
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"empty-dir", map[string]string{}, "no tokenizer.json"},
		{"truncated-json", map[string]string{"tokenizer.json": `{"model": {"type": "BPE", "vocab": {"a": 0`}, "tokenizer.json"},
		{"bad-config", map[string]string{"tokenizer.json": edit(nil), "tokenizer_config.json": `{`}, "tokenizer_config.json"},
		{"bad-template", map[string]string{"tokenizer.json": edit(nil), "tokenizer_config.json": `{"chat_template": "{% for %}"}`}, "chat template"},
		{"wordpiece", map[string]string{"tokenizer.json": edit(func(m map[string]any) { m["model"].(map[string]any)["type"] = "WordPiece" })}, "WordPiece"},
		{"normalizer", map[string]string{"tokenizer.json": edit(func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Lowercase"} })}, "Lowercase"},
		{"metaspace", map[string]string{"tokenizer.json": edit(func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Metaspace"} })}, "Metaspace"},
		{"no-pretok", map[string]string{"tokenizer.json": edit(func(m map[string]any) { m["pre_tokenizer"] = nil })}, "pre_tokenizer"},
		{"decoder", map[string]string{"tokenizer.json": edit(func(m map[string]any) { m["decoder"] = map[string]any{"type": "WordPiece"} })}, "decoder"},
		{"bad-merge", map[string]string{"tokenizer.json": edit(func(m map[string]any) { m["model"].(map[string]any)["merges"] = []string{"x yz"} })}, "merges[0]"},
		{"merge-one-token", map[string]string{"tokenizer.json": edit(func(m map[string]any) { m["model"].(map[string]any)["merges"] = []string{"xy"} })}, "merges[0]"},
		{"huge-id", map[string]string{"tokenizer.json": edit(func(m map[string]any) { m["model"].(map[string]any)["vocab"].(map[string]int)["zz"] = 1 << 30 })}, "out of range"},
		{"negative-id", map[string]string{"tokenizer.json": edit(func(m map[string]any) { m["model"].(map[string]any)["vocab"].(map[string]int)["zz"] = -1 })}, "out of range"},
		{"dup-id", map[string]string{"tokenizer.json": edit(func(m map[string]any) { m["model"].(map[string]any)["vocab"].(map[string]int)["zz"] = 5 })}, "two tokens"},
		{"missing-byte", map[string]string{"tokenizer.json": edit(func(m map[string]any) {
			delete(m["model"].(map[string]any)["vocab"].(map[string]int), "a")
			m["model"].(map[string]any)["merges"] = []string{}
		})}, "single-byte"},
		{"added-no-id", map[string]string{"tokenizer.json": edit(func(m map[string]any) { m["added_tokens"] = []any{map[string]any{"content": "x"}} })}, "added_tokens[0]"},
		{"two-llama2c", map[string]string{"tok1.bin": "", "tok2.bin": ""}, "several"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeDir(t, tt.files)
			_, err := LoadDir(dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
	if _, err := LoadDir(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Error("missing directory loaded")
	}
}

// TestByteLevelBPEFromGGUFLists rebuilds Qwen3 the way the native engine
// will from GGUF metadata (vocab list, "a b" merges, added tokens, pre name)
// and checks it is the same tokenizer as LoadDir's.
func TestByteLevelBPEFromGGUFLists(t *testing.T) {
	m := testQwen3(t)
	data, err := os.ReadFile(filepath.Join(qwenDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
		Model struct {
			Vocab  map[string]int `json:"vocab"`
			Merges [][2]string    `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &tf); err != nil {
		t.Fatal(err)
	}
	vocab := make([]string, m.Tokenizer.VocabSize())
	for s, id := range tf.Model.Vocab {
		vocab[id] = s
	}
	var added []AddedToken
	for _, a := range tf.AddedTokens {
		vocab[a.ID] = a.Content
		added = append(added, AddedToken{ID: tokenid.ID(a.ID), Content: a.Content, Special: a.Special})
	}
	sort.Slice(added, func(i, j int) bool { return added[i].ID < added[j].ID })
	merges := make([]string, len(tf.Model.Merges))
	for i, p := range tf.Model.Merges {
		merges[i] = p[0] + " " + p[1]
	}
	tok, err := NewByteLevelBPE(vocab, merges, added, "qwen2")
	if err != nil {
		t.Fatal(err)
	}
	tok, err = WithSpecials(tok, m.Tokenizer.EOS(), -1, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range readFixture[qwenEncodeCase](t, "qwen3-encode.json") {
		if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Errorf("Encode(%q)\n got %v\nwant %v", c.Text, got, c.IDs)
		}
	}
	if _, err := NewByteLevelBPE([]string{"a"}, []string{"a b"}, nil, "gpt2"); err == nil {
		t.Error("bad merge accepted")
	}
	if _, err := NewByteLevelBPE(vocab, nil, []AddedToken{{ID: -4, Content: "x"}}, "qwen2"); err == nil {
		t.Error("bad added id accepted")
	}
}
