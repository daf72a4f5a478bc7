package native

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine/native/model"
	"github.com/tandemllm/tandem/tokenizer"
)

func qwen3Dir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("TANDEM_CACHE")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".cache", "tandem")
	}
	dir := filepath.Join(root, "tokenizers", "qwen3")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Skip("Qwen3 tokenizer not cached; run scripts/fetch-qwen3-tokenizer.sh")
	}
	return dir
}

// TestGPT2VocabFromGGUFMetadata rebuilds the Qwen3 tokenizer the way a
// GGUF file stores it (tokenizer.ggml.tokens / merges / token_type, pre
// "qwen2", eos id) and checks it encodes like the HF tokenizer.json,
// special tokens included, and ends generation at <|im_end|>.
func TestGPT2VocabFromGGUFMetadata(t *testing.T) {
	dir := qwen3Dir(t)
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tj struct {
		Model struct {
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
		t.Fatal(err)
	}
	n := int32(0)
	for _, id := range tj.Model.Vocab {
		n = max(n, id+1)
	}
	for _, a := range tj.Added {
		n = max(n, a.ID+1)
	}
	v := &model.Vocab{Model: "gpt2", Pre: "qwen2", Tokens: make([]string, n), Types: make([]int32, n), BOS: -1, EOS: -1}
	for tok, id := range tj.Model.Vocab {
		v.Tokens[id], v.Types[id] = tok, tokenizer.TypeNormal
	}
	for _, a := range tj.Added {
		v.Tokens[a.ID], v.Types[a.ID] = a.Content, tokenizer.TypeUserDefined
		if a.Special {
			v.Types[a.ID] = tokenizer.TypeControl
		}
		if a.Content == "<|im_end|>" {
			v.EOS = a.ID
		}
	}
	for _, m := range tj.Model.Merges {
		var s string
		if json.Unmarshal(m, &s) != nil {
			var pair []string
			if err := json.Unmarshal(m, &pair); err != nil || len(pair) != 2 {
				t.Fatalf("merge %s", m)
			}
			s = pair[0] + " " + pair[1]
		}
		v.Merges = append(v.Merges, s)
	}
	got, err := VocabTokenizer(v)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"<|im_start|>user\nHello, world!<|im_end|>\n<|im_start|>assistant\n",
		"Café 中文 😀  tabs\tand\r\nnewlines <think>x</think>",
		strings.Repeat("The quick brown fox. ", 20),
	} {
		if a, b := got.Encode(s), ref.Tokenizer.Encode(s); !slices.Equal(a, b) {
			t.Fatalf("%q:\n gguf %v\n   hf %v", s, a, b)
		}
	}
	if !slices.Contains(got.EOS(), v.EOS) {
		t.Fatalf("EOS %v lacks <|im_end|> (%d)", got.EOS(), v.EOS)
	}
}
