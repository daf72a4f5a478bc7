package native

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/tokenizer"
)

// byteLevelTokenizerDir writes a Hugging Face tokenizer directory with a
// byte-level BPE vocabulary of the 256 byte symbols (GPT-2's
// bytes_to_unicode), no merges and one special token <|im_end|>, and a
// tokenizer_config.json holding template when it is not empty.
func byteLevelTokenizerDir(t *testing.T, template string) string {
	t.Helper()
	vocab := map[string]int{}
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF) {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = b
	}
	tj := map[string]any{
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
		"added_tokens":  []map[string]any{{"id": 256, "content": "<|im_end|>", "special": true}},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"decoder":       map[string]any{"type": "ByteLevel"},
	}
	cfg := map[string]any{"eos_token": "<|im_end|>"}
	if template != "" {
		cfg["chat_template"] = template
	}
	dir := t.TempDir()
	for name, v := range map[string]any{"tokenizer.json": tj, "tokenizer_config.json": cfg} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const testTemplate = `{%- for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{%- endfor %}{%- if add_generation_prompt %}<assistant>{%- endif %}`

func renderChat(t *testing.T, m *tokenizer.Model) (string, error) {
	t.Helper()
	return m.Template.Render(tokenizer.ChatInput{Messages: json.RawMessage(`[{"role":"user","content":"hi"}]`), AddGenerationPrompt: true})
}

// TestChatTemplateTravels: the chat template of a tokenizer directory goes
// into GGUF files `model gen` writes, survives a Hugging Face directory's
// `model quantize`, and is the template ServedModel renders with, eos_token
// bound to the vocabulary's piece.
func TestChatTemplateTravels(t *testing.T) {
	tok := byteLevelTokenizerDir(t, testTemplate)
	const want = "<user>hi<|im_end|><assistant>"
	gen := filepath.Join(t.TempDir(), "gen.gguf")
	if err := GenerateModel(gen, GenOptions{Shape: "tiny-qwen3", Seed: 1, DType: "q8_0", Tokenizer: tok}); err != nil {
		t.Fatal(err)
	}
	hf := filepath.Join(t.TempDir(), "hf")
	if err := GenerateModel(hf, GenOptions{Shape: "tiny-qwen3", Seed: 1, DType: "bf16", Tokenizer: tok, HF: true}); err != nil {
		t.Fatal(err)
	}
	quant := filepath.Join(t.TempDir(), "quant.gguf")
	if err := QuantizeModelFile(hf, quant, "q8_0"); err != nil {
		t.Fatal(err)
	}
	requant := filepath.Join(t.TempDir(), "requant.gguf")
	if err := QuantizeModelFile(quant, requant, "q4_k_m"); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{gen, quant, requant, hf} {
		m, err := ServedModel(path)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := renderChat(t, m); err != nil || got != want {
			t.Errorf("%s: Render = %q, %v; want %q", filepath.Base(path), got, err, want)
		}
	}
}

// TestChatTemplateMissing: a GGUF without a chat template refuses chat
// with an error naming --chat-template, and a template given in its place
// (ServedModelTemplate, Quantize's ChatTemplate) is used.
func TestChatTemplateMissing(t *testing.T) {
	tok := byteLevelTokenizerDir(t, "")
	path := filepath.Join(t.TempDir(), "bare.gguf")
	if err := GenerateModel(path, GenOptions{Shape: "tiny", Seed: 1, DType: "f32", Tokenizer: tok}); err != nil {
		t.Fatal(err)
	}
	m, err := ServedModel(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := renderChat(t, m)
	if !errors.Is(err, tokenizer.ErrNoChatTemplate) || !strings.Contains(err.Error(), "--chat-template FILE") || got != "" {
		t.Fatalf("Render = %q, %v; want the missing-template error naming --chat-template FILE", got, err)
	}
	if !tokenizer.IsMissingChatTemplate(m.Template) {
		t.Error("IsMissingChatTemplate = false")
	}
	const want = "<user>hi<|im_end|><assistant>"
	if m, err = ServedModelTemplate(path, testTemplate); err != nil {
		t.Fatal(err)
	}
	if got, err := renderChat(t, m); err != nil || got != want {
		t.Errorf("ServedModelTemplate: Render = %q, %v", got, err)
	}
	fixed := filepath.Join(t.TempDir(), "fixed.gguf")
	if err := Quantize(path, fixed, QuantizeOptions{Type: "q8_0", ChatTemplate: testTemplate}); err != nil {
		t.Fatal(err)
	}
	if m, err = ServedModel(fixed); err != nil {
		t.Fatal(err)
	}
	if got, err := renderChat(t, m); err != nil || got != want {
		t.Errorf("quantized with a template: Render = %q, %v", got, err)
	}
	// A template needs somewhere to go.
	if err := GenerateModel(filepath.Join(t.TempDir(), "x.gguf"), GenOptions{Shape: "tiny", ChatTemplate: testTemplate}); err == nil {
		t.Error("a chat template without a tokenizer was accepted")
	}
}
