package native

import (
	"slices"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/internal/sharedfiles"
	"github.com/tandemllm/tandem/tokenizer"
)

func qwen3Dir(t *testing.T) string {
	t.Helper()
	dir, err := sharedfiles.Qwen3Tokenizer()
	if err != nil {
		t.Skip(err)
	}
	return dir
}

// TestGPT2VocabFromGGUFMetadata rebuilds the Qwen3 tokenizer the way a
// GGUF file stores it (tokenizer.ggml.tokens / merges / token_type, pre
// "qwen2", eos id) and checks it encodes like the HF tokenizer.json,
// special tokens included, and ends generation at <|im_end|>.
func TestGPT2VocabFromGGUFMetadata(t *testing.T) {
	dir := qwen3Dir(t)
	v, err := VocabFromFile(dir) // tokenizer.json as llama.cpp's converter stores it
	if err != nil {
		t.Fatal(err)
	}
	if v.Pre != "qwen2" || v.EOS < 0 || v.Tokens[v.EOS] != "<|im_end|>" {
		t.Fatalf("pre %q, eos %d", v.Pre, v.EOS)
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
