package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/engine/native"
	"github.com/tandemllm/tandem/internal/schematest"
	"github.com/tandemllm/tandem/internal/sharedfiles"
	"github.com/tandemllm/tandem/structured"
	"github.com/tandemllm/tandem/tokenizer"
)

// structuredVocab is the tokenizer's vocabulary as cmd/tandem builds it for
// structured outputs.
func structuredVocab(t testing.TB, tok tokenizer.Tokenizer) *structured.Vocab {
	v, err := structured.TokenizerVocab(tok)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// postJSON posts body and returns the status and decoded response.
func postJSON(t testing.TB, url string, body any) (int, map[string]any) {
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

func chatContent(t testing.TB, out map[string]any) (string, string) {
	ch := out["choices"].([]any)[0].(map[string]any)
	msg := ch["message"].(map[string]any)
	content, _ := msg["content"].(string)
	return content, ch["finish_reason"].(string)
}

var serveSchemas = []string{
	`{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":120},"when":{"type":"string","format":"date"}},"required":["name","age","when"],"additionalProperties":false}`,
	`{"type":"object","properties":{"items":{"type":"array","items":{"enum":["a","b",1]},"minItems":1,"maxItems":4},"ok":{"type":"boolean"},"note":{"anyOf":[{"type":"string","maxLength":6},{"type":"null"}]}},"required":["items","ok","note"],"additionalProperties":false}`,
}

// checkStructured runs the API's constraint forms against a running
// system and checks every output.
func checkStructured(t *testing.T, url, model string, rounds, maxTokens int, jsonObject bool) {
	for i, s := range serveSchemas {
		v := schematest.Compile(t, s)
		for r := range rounds {
			code, out := postJSON(t, url+"/v1/chat/completions", map[string]any{
				"model": model, "messages": []any{map[string]any{"role": "user", "content": "give me JSON"}},
				"max_tokens": maxTokens, "seed": r, "temperature": 1,
				"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "strict": true, "schema": json.RawMessage(s)}},
			})
			if code != 200 {
				t.Fatalf("schema %d: %d %v", i, code, out)
			}
			content, finish := chatContent(t, out)
			if finish != "stop" {
				t.Fatalf("schema %d round %d: finish %s: %q", i, r, finish, content)
			}
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(content))
			if err != nil {
				t.Fatalf("schema %d: does not parse: %v: %q", i, err, content)
			}
			if err := v.Validate(inst); err != nil {
				t.Fatalf("schema %d: invalid: %v: %q", i, err, content)
			}
		}
	}
	// vLLM's structured_outputs on completions.
	code, out := postJSON(t, url+"/v1/completions", map[string]any{
		"model": model, "prompt": "pick", "max_tokens": 50, "structured_outputs": map[string]any{"choice": []string{"yes", "no", "maybe"}},
	})
	if code != 200 {
		t.Fatalf("choice: %d %v", code, out)
	}
	if txt := out["choices"].([]any)[0].(map[string]any)["text"]; txt != "yes" && txt != "no" && txt != "maybe" {
		t.Fatalf("choice: %q", txt)
	}
	code, out = postJSON(t, url+"/v1/completions", map[string]any{
		"model": model, "prompt": "code", "max_tokens": 50, "structured_outputs": map[string]any{"regex": `[A-Z]{2}-[0-9]{3}`},
	})
	if txt, _ := out["choices"].([]any)[0].(map[string]any)["text"].(string); code != 200 || !regexp.MustCompile(`^[A-Z]{2}-[0-9]{3}$`).MatchString(txt) {
		t.Fatalf("regex: %d %v", code, out)
	}
	// json_object (a random-weight model may write one longer than its
	// context; the mocker's ends).
	if jsonObject {
		jsonObjectCheck(t, url, model, maxTokens)
	}
	// A forced tool call: the Hermes/Qwen syntax with valid arguments.
	params := `{"type":"object","properties":{"city":{"type":"string","maxLength":10},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"],"additionalProperties":false}`
	code, out = postJSON(t, url+"/v1/chat/completions", map[string]any{
		"model": model, "messages": []any{map[string]any{"role": "user", "content": "weather?"}}, "max_tokens": maxTokens,
		"tools":       []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": json.RawMessage(params)}}},
		"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}},
	})
	if code != 200 {
		t.Fatalf("tool: %d %v", code, out)
	}
	checkToolCall(t, out, schematest.Compile(t, params))
	checkRefusals(t, url, model)
}

func jsonObjectCheck(t *testing.T, url, model string, maxTokens int) {
	code, out := postJSON(t, url+"/v1/chat/completions", map[string]any{
		"model": model, "messages": []any{map[string]any{"role": "user", "content": "json"}}, "max_tokens": maxTokens,
		"response_format": map[string]any{"type": "json_object"},
	})
	content, finish := chatContent(t, out)
	var obj map[string]any
	if code != 200 || finish != "stop" || json.Unmarshal([]byte(content), &obj) != nil {
		t.Fatalf("json_object: %d %s %q", code, finish, content)
	}
}

func checkRefusals(t *testing.T, url, model string) {
	// Refusals name the field and keyword before any token.
	code, out := postJSON(t, url+"/v1/chat/completions", map[string]any{
		"model": model, "messages": []any{map[string]any{"role": "user", "content": "x"}},
		"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": map[string]any{"type": "object", "propertyNames": map[string]any{"maxLength": 2}}}},
	})
	if e, _ := out["error"].(map[string]any); code != 400 || e["param"] != "response_format.json_schema.schema" || !strings.Contains(fmt.Sprint(e["message"]), "propertyNames") {
		t.Fatalf("unsupported keyword: %d %v", code, out)
	}
	code, out = postJSON(t, url+"/v1/chat/completions", map[string]any{
		"model": model, "messages": []any{map[string]any{"role": "user", "content": "x"}},
		"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": map[string]any{"type": "integer", "minimum": 5, "maximum": 4}}},
	})
	if e, _ := out["error"].(map[string]any); code != 400 || e["code"] != "unsatisfiable_schema" {
		t.Fatalf("unsatisfiable: %d %v", code, out)
	}
}

// checkToolCall demands the forced call as tool_calls: the constraint
// writes the model family's syntax (Hermes here) and the chat endpoint's
// tool parser turns it into the call, finish_reason "tool_calls".
func checkToolCall(t *testing.T, out map[string]any, v *jsonschema.Schema) {
	choice := out["choices"].([]any)[0].(map[string]any)
	msg := choice["message"].(map[string]any)
	calls, ok := msg["tool_calls"].([]any)
	if !ok || len(calls) != 1 {
		t.Fatalf("want one tool call, got message %v", msg)
	}
	if choice["finish_reason"] != "tool_calls" {
		t.Fatalf("finish_reason %v, want tool_calls", choice["finish_reason"])
	}
	f := calls[0].(map[string]any)["function"].(map[string]any)
	if f["name"] != "get_weather" {
		t.Fatalf("tool call %v", f)
	}
	args := f["arguments"].(string)
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(args))
	if err != nil {
		t.Fatalf("arguments %q: %v", args, err)
	}
	if err := v.Validate(inst); err != nil {
		t.Fatalf("arguments %q: %v", args, err)
	}
}

// TestStructuredOutputsMocker: the mocker draws uniformly among the tokens
// each mask allows, so every output is a random member of the schema's
// language: all parse and validate.
func TestStructuredOutputsMocker(t *testing.T) {
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	vocab := structuredVocab(t, model.Tokenizer)
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.Workers = "127.0.0.1:0", 1
	sys, err := Start(cfg, model, func(int) (engine.Engine, error) {
		c := mockerConfig(model)
		c.Instant, c.TokenBytes = true, vocab
		return mocker.New(c)
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Shutdown(context.Background()) })
	checkStructured(t, sys.URL(), model.Name, 3, 3000, true)
}

// TestStructuredOutputsNative: a random-weight Qwen3-shaped model on the
// native engine, masked, sampled at temperature 1.
func TestStructuredOutputsNative(t *testing.T) {
	tokDir, err := sharedfiles.Qwen3Tokenizer()
	if err != nil {
		t.Skip(err)
	}
	dir := filepath.Join(t.TempDir(), "m")
	if err := native.GenerateModel(dir, native.GenOptions{Shape: "tiny-qwen3", Seed: 1, HF: true, Tokenizer: tokDir}); err != nil {
		t.Fatal(err)
	}
	model, err := native.ServedModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	vocab := structuredVocab(t, model.Tokenizer)
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.Workers = "127.0.0.1:0", 1
	sys, err := Start(cfg, model, func(int) (engine.Engine, error) {
		e, _, err := native.Load(dir, native.Options{Model: model.Name, Threads: 1, Vocab: vocab})
		return e, err
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Shutdown(context.Background()) })
	checkStructured(t, sys.URL(), model.Name, 1, 300, false)
}
