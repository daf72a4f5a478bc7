package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
)

func doJSON(t *testing.T, url, auth, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return resp.StatusCode, v
}

func ints(v any) []engine.Token {
	var out []engine.Token
	for _, x := range v.([]any) {
		out = append(out, engine.Token(x.(float64)))
	}
	return out
}

// TestTokenizeDetokenize: /tokenize and /detokenize answer with vLLM's
// field names (count, max_model_len, tokens; prompt), take a prompt or
// messages (through the chat template, with add_generation_prompt), name
// the field they refuse, and sit behind the API keys like /v1.
func TestTokenizeDetokenize(t *testing.T) {
	keys, err := ParseAPIKeys([]byte(key1 + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.APIKeys = keys
	f := newFixtureCfg(t, cfg, 4096, map[string]engine.Generator{"w0": &enginetest.Scripted{Name: "m", Output: toks("x")}})
	auth := "Bearer " + key1

	code, v := doJSON(t, f.url+"/tokenize", auth, `{"model":"m","prompt":"héllo"}`)
	if code != 200 || !slices.Equal(ints(v["tokens"]), toks("héllo")) || v["count"].(float64) != float64(len(toks("héllo"))) || v["max_model_len"].(float64) != 4096 {
		t.Fatalf("prompt: %d %v", code, v)
	}
	if _, ok := v["token_strs"]; !ok || v["token_strs"] != nil {
		t.Fatalf("token_strs must be null unless asked for: %v", v)
	}
	code, v = doJSON(t, f.url+"/tokenize", auth, `{"prompt":"ab","return_token_strs":true}`)
	if code != 200 || len(v["token_strs"].([]any)) != 2 || v["token_strs"].([]any)[1] != "b" {
		t.Fatalf("model left out, token strings: %d %v", code, v)
	}
	want := toks("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
	code, v = doJSON(t, f.url+"/tokenize", auth, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if code != 200 || !slices.Equal(ints(v["tokens"]), want) {
		t.Fatalf("messages: %d %v", code, v)
	}
	code, v = doJSON(t, f.url+"/tokenize", auth, `{"model":"m","messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false}`)
	if code != 200 || !slices.Equal(ints(v["tokens"]), toks("<|im_start|>user\nhi<|im_end|>\n")) {
		t.Fatalf("no generation prompt: %d %v", code, v)
	}
	code, v = doJSON(t, f.url+"/detokenize", auth, `{"model":"m","tokens":[104,105,257]}`)
	if code != 200 || v["prompt"] != "hi<|im_end|>" {
		t.Fatalf("detokenize: %d %v", code, v)
	}
	for _, tc := range []struct{ path, body, param string }{
		{"/tokenize", `{"model":"m"}`, "prompt"},
		{"/tokenize", `{"model":"m","prompt":"a","messages":[{"role":"user","content":"hi"}]}`, "messages"},
		{"/tokenize", `{"model":"m","messages":[{"role":"wizard","content":"hi"}]}`, "messages[0].role"},
		{"/tokenize", `{"model":"m","prompt":5}`, "prompt"},
		{"/detokenize", `{"model":"m","tokens":[1,999]}`, "tokens[1]"},
		{"/detokenize", `{"model":"m","tokens":[1,-2]}`, "tokens[1]"},
		{"/detokenize", `{"model":"m"}`, "tokens"},
	} {
		code, v := doJSON(t, f.url+tc.path, auth, tc.body)
		if e, _ := v["error"].(map[string]any); code != 400 || e["param"] != tc.param {
			t.Errorf("%s %s: %d %v, want 400 naming %s", tc.path, tc.body, code, v, tc.param)
		}
	}
	if code, _ := doJSON(t, f.url+"/tokenize", auth, `{"model":"nope","prompt":"a"}`); code != 404 {
		t.Fatalf("unknown model: %d", code)
	}
	for _, path := range []string{"/tokenize", "/detokenize"} {
		if code, _ := doJSON(t, f.url+path, "", `{"model":"m","prompt":"a","tokens":[1]}`); code != 401 {
			t.Fatalf("%s without a key: %d", path, code)
		}
	}
}
