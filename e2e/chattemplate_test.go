package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeByteLevelTokenizer writes a Hugging Face tokenizer directory with
// the 256 byte symbols of byte-level BPE (GPT-2's bytes_to_unicode) and
// <|im_end|> as EOS, with no chat template.
func writeByteLevelTokenizer(t *testing.T) string {
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
	dir := t.TempDir()
	tj, _ := json.Marshal(map[string]any{
		"model":        map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
		"added_tokens": []map[string]any{{"id": 256, "content": "<|im_end|>", "special": true}},
	})
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"eos_token":"<|im_end|>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestServeChatTemplate: `model gen` says what it wrote and how to serve
// it; a GGUF without a chat template served natively refuses a chat
// request with a 400 naming --chat-template FILE (never raw text), and
// serves it once --chat-template gives one.
func TestServeChatTemplate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts tandem twice")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "bare.gguf")
	out, err := runCLI(t, "model", "gen", "--shape", "tiny", "--dtype", "q8_0", "--tokenizer", writeByteLevelTokenizer(t), "--out", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"wrote " + path + ": GGUF, ", "q8_0", "tandem serve --engine native --model " + path} {
		if !strings.Contains(out, want) {
			t.Errorf("model gen said %q, want %q in it", out, want)
		}
	}
	tmpl := filepath.Join(dir, "chat_template.jinja")
	if err := os.WriteFile(tmpl, []byte(`{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}`), 0o644); err != nil {
		t.Fatal(err)
	}
	chat := func(url string) (int, string) {
		body := `{"model":"bare","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	p := startTandem(t, "serve --http-addr 127.0.0.1:0 --engine native --threads 1 --model "+path)
	if code, body := chat(p.url); code != http.StatusBadRequest || !strings.Contains(body, "--chat-template FILE") {
		t.Fatalf("chat without a template: %d %s", code, body)
	}
	p = startTandem(t, "serve --http-addr 127.0.0.1:0 --engine native --threads 1 --kv-cache-bytes 4MiB --workers 2 --model "+path+" --chat-template "+tmpl)
	if code, body := chat(p.url); code != http.StatusOK {
		t.Fatalf("chat with --chat-template: %d %s", code, body)
	}
}
