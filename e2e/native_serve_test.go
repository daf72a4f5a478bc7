package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine/native"
	"github.com/tandemllm/tandem/internal/sharedfiles"
)

// TestServeNativeModelKinds: `tandem serve --engine native --model PATH`
// serves a GGUF file (tokenizer in its metadata) and a Hugging Face
// directory (config.json, safetensors, tokenizer.json), each answering a
// real HTTP completion with generated tokens.
func TestServeNativeModelKinds(t *testing.T) {
	if testing.Short() {
		t.Skip("generates models and starts tandem twice")
	}
	ref, err := sharedfiles.Path("models", "stories260K")
	if err != nil {
		t.Skipf("no shared directory: %v", err)
	}
	tok512 := filepath.Join(ref, "tok512.bin")
	if _, err := os.Stat(tok512); err != nil {
		t.Skipf("reference tokenizer absent: %v", err)
	}
	qwen3, qwen3Err := sharedfiles.Qwen3Tokenizer()
	for _, c := range []struct {
		name string
		opts native.GenOptions
		path string
	}{
		{"gguf-q8_0", native.GenOptions{Shape: "tiny", Seed: 3, DType: "q8_0", Tokenizer: tok512}, "tiny-q8_0.gguf"},
		{"hf-bf16", native.GenOptions{Shape: "tiny-qwen3", Seed: 3, DType: "bf16", Tokenizer: qwen3, HF: true}, "tiny-qwen3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.opts.HF {
				if qwen3Err != nil {
					t.Skip(qwen3Err)
				}
			}
			path := filepath.Join(t.TempDir(), c.path)
			if err := native.GenerateModel(path, c.opts); err != nil {
				t.Fatal(err)
			}
			p := startTandem(t, "serve --http-addr 127.0.0.1:0 --engine native --threads 1 --model "+path)
			resp, err := http.Get(p.url + "/v1/models")
			if err != nil {
				t.Fatal(err)
			}
			var models struct {
				Data []struct{ ID string } `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&models)
			resp.Body.Close()
			if err != nil || len(models.Data) != 1 {
				t.Fatalf("/v1/models: %+v, %v", models, err)
			}
			body, _ := json.Marshal(map[string]any{"model": models.Data[0].ID, "prompt": "Once upon a time",
				"max_tokens": 8, "temperature": 0, "ignore_eos": true})
			resp, err = http.Post(p.url+"/v1/completions", "application/json", strings.NewReader(string(body)))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out struct {
				Choices []struct{ Text string } `json:"choices"`
				Usage   struct {
					Prompt     int `json:"prompt_tokens"`
					Completion int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || len(out.Choices) != 1 {
				t.Fatalf("status %d: %+v, %v", resp.StatusCode, out, err)
			}
			if out.Usage.Prompt == 0 || out.Usage.Completion != 8 {
				t.Fatalf("usage %+v, want a tokenized prompt and 8 generated tokens", out.Usage)
			}
			t.Logf("%s (%s): %d prompt tokens, %q", c.name, models.Data[0].ID, out.Usage.Prompt, out.Choices[0].Text)
		})
	}
}
