package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tandemllm/tandem/engine/native"
	"github.com/tandemllm/tandem/internal/schematest"
	"github.com/tandemllm/tandem/internal/sharedfiles"
)

// forcedTools are the tools of the forced-call requests: bounded
// parameters, so that a random model's calls end well inside max_tokens.
var forcedTools = map[string]string{
	"get_weather": `{"type":"object","properties":{"city":{"type":"string","maxLength":10},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"],"additionalProperties":false}`,
	"now":         `{"type":"object","properties":{"tz":{"enum":["utc","local"]}},"required":["tz"],"additionalProperties":false}`,
}

// TestForcedToolCallParsers: `tandem serve` started with
// --tool-call-parser llama3_json or mistral, on the native engine (a
// random-weight Qwen3-shaped model) and on the mocker, answers a forced
// tool call (tool_choice "required", with and without parallel calls, and
// a named function) as tool_calls whose arguments validate against the
// tool's parameters (santhosh-tekuri/jsonschema, not the code under test),
// finish_reason "tool_calls", never as text; streamed, the call arrives as
// delta.tool_calls.
func TestForcedToolCallParsers(t *testing.T) {
	longParallel(t)
	qwen3, err := sharedfiles.Qwen3Tokenizer()
	if err != nil {
		t.Skip(err)
	}
	dir := filepath.Join(t.TempDir(), "tiny-qwen3")
	if err := native.GenerateModel(dir, native.GenOptions{Shape: "tiny-qwen3", Seed: 1, HF: true, Tokenizer: qwen3}); err != nil {
		t.Fatal(err)
	}
	validators := map[string]*jsonschema.Schema{}
	for name, s := range forcedTools {
		validators[name] = schematest.Compile(t, s)
	}
	for _, parser := range []string{"llama3_json", "mistral"} {
		for _, eng := range []struct{ name, args string }{
			{"native", "--engine native --threads 1 --model " + dir},
			{"mocker", "--engine mocker --instant"},
		} {
			// One after the other: a server's start (the vocabulary's
			// structured-output tables) is CPU-bound.
			t.Run(parser+"/"+eng.name, func(t *testing.T) {
				p := startTandem(t, "serve --http-addr 127.0.0.1:0 --workers 1 --tool-call-parser "+parser+" "+eng.args)
				noParallel := false
				model := p.model
				if model == "" {
					model = modelID(t, p.url)
				}
				for _, c := range []struct {
					name     string
					choice   any
					parallel *bool
					want     string // the one tool every call must name; "" any
					single   bool
				}{
					{"required", "required", nil, "", false},
					{"required single", "required", &noParallel, "", true},
					{"named", map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}, nil, "get_weather", true},
				} {
					for _, stream := range []bool{false, true} {
						body := map[string]any{
							"model": model, "messages": []any{map[string]any{"role": "user", "content": "What is the weather in Paris?"}},
							"max_tokens": 200, "temperature": 1, "seed": 7, "tool_choice": c.choice, "stream": stream,
						}
						var tools []any
						for _, n := range []string{"get_weather", "now"} {
							tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": n, "parameters": json.RawMessage(forcedTools[n])}})
						}
						body["tools"] = tools
						if c.parallel != nil {
							body["parallel_tool_calls"] = *c.parallel
						}
						var got forcedReply
						if stream {
							got = postStreamedChat(t, p.url, body)
						} else {
							got = postForced(t, p.url, body)
						}
						what := fmt.Sprintf("%s stream=%v", c.name, stream)
						if strings.TrimSpace(got.content) != "" || got.finish != "tool_calls" || len(got.calls) == 0 || c.single && len(got.calls) != 1 {
							t.Fatalf("%s: content %q, finish %q, calls %+v", what, got.content, got.finish, got.calls)
						}
						for _, call := range got.calls {
							v := validators[call.name]
							if v == nil || c.want != "" && call.name != c.want {
								t.Fatalf("%s: call of %q", what, call.name)
							}
							inst, err := jsonschema.UnmarshalJSON(strings.NewReader(call.args))
							if err != nil {
								t.Fatalf("%s: %s arguments %q: %v", what, call.name, call.args, err)
							}
							if err := v.Validate(inst); err != nil {
								t.Fatalf("%s: %s arguments %q: %v", what, call.name, call.args, err)
							}
							if call.id == "" {
								t.Fatalf("%s: call id %q", what, call.id)
							}
						}
						t.Logf("%s: %d call(s), first %s(%s)", what, len(got.calls), got.calls[0].name, got.calls[0].args)
					}
				}
			})
		}
	}
}

type forcedCall struct{ id, name, args string }

type forcedReply struct {
	content, finish string
	calls           []forcedCall
}

// modelID is the one model /v1/models lists.
func modelID(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/models", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var models struct {
		Data []struct{ ID string } `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&models); err != nil || len(models.Data) != 1 {
		t.Fatalf("/v1/models: %+v, %v", models, err)
	}
	return models.Data[0].ID
}

func chatPost(t *testing.T, url string, body any) (*http.Response, context.CancelFunc) {
	t.Helper()
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		cancel()
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	return resp, cancel
}

type wireCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func postForced(t *testing.T, url string, body any) forcedReply {
	t.Helper()
	resp, cancel := chatPost(t, url, body)
	defer cancel()
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Message struct {
				Content   *string    `json:"content"`
				ToolCalls []wireCall `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("reply: %+v, %v", out, err)
	}
	ch := out.Choices[0]
	r := forcedReply{finish: ch.FinishReason}
	if ch.Message.Content != nil {
		r.content = *ch.Message.Content
	}
	for _, c := range ch.Message.ToolCalls {
		r.calls = append(r.calls, forcedCall{c.ID, c.Function.Name, c.Function.Arguments})
	}
	return r
}

// postStreamedChat reads a streamed chat reply, joining delta.tool_calls
// by index as OpenAI's clients do.
func postStreamedChat(t *testing.T, url string, body any) forcedReply {
	t.Helper()
	resp, cancel := chatPost(t, url, body)
	defer cancel()
	defer resp.Body.Close()
	var r forcedReply
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	done := false
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content   string     `json:"content"`
					ToolCalls []wireCall `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Error any `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &chunk); err != nil || chunk.Error != nil {
			t.Fatalf("chunk %q: %v", line, err)
		}
		for _, ch := range chunk.Choices {
			r.content += ch.Delta.Content
			for _, d := range ch.Delta.ToolCalls {
				if d.Index < 0 || d.Index > len(r.calls) {
					t.Fatalf("tool call delta index %d after %d calls", d.Index, len(r.calls))
				}
				if d.Index == len(r.calls) {
					r.calls = append(r.calls, forcedCall{})
				}
				c := &r.calls[d.Index]
				if d.ID != "" {
					c.id = d.ID
				}
				c.name += d.Function.Name
				c.args += d.Function.Arguments
			}
			if ch.FinishReason != nil {
				r.finish = *ch.FinishReason
			}
		}
	}
	if err := sc.Err(); err != nil || !done {
		t.Fatalf("stream ended without [DONE]: %v", err)
	}
	return r
}
