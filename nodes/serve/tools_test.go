package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/internal/sharedfiles"
	"github.com/tandemllm/tandem/tokenizer"
)

// toolScript makes the mocker reason, then call get_weather for a weather
// question, and answer from the tool's result on the next turn.
const toolScript = `{"rules":[
 {"role":"tool","when":"21","reply":"<think>The tool says 21C.</think>It is sunny and 21C in Paris."},
 {"when":"weather","reply":"<think>I should call the tool.</think>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>"},
 {"when":"","reply":"Hello."}]}`

func scriptedEngines(t *testing.T, script string) func(*tokenizer.Model) EngineFactory {
	return func(model *tokenizer.Model) EngineFactory {
		sc, err := mocker.ParseScript([]byte(script), model)
		if err != nil {
			t.Fatal(err)
		}
		return func(int) (engine.Engine, error) {
			cfg := mockerConfig(model)
			cfg.Instant, cfg.Script = true, sc
			return mocker.New(cfg)
		}
	}
}

var weatherTool = openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: openai.FunctionDefinitionParam{
	Name: "get_weather", Description: openai.String("Current weather of a city"),
	Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}, "unit": map[string]any{"type": "string"}}, "required": []string{"city"}},
}}}

// TestChatToolsEndToEnd: over real HTTP through serve, with the official
// client: a tool call non-streaming and streaming (accumulated by the
// client from OpenAI-shaped deltas), reasoning split out and counted, and a
// second turn carrying the assistant's call and the tool's result back
// through the chat template.
func TestChatToolsEndToEnd(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Workers = 1
	cfg.Frontend.ReasoningParser = "qwen3" // the built-in ChatML's tool format is detected; reasoning is asked for
	sys := startTest(t, cfg, scriptedEngines(t, toolScript))
	c := openai.NewClient(option.WithBaseURL(sys.URL()+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
	ctx := context.Background()
	first := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")}
	params := openai.ChatCompletionNewParams{Model: tokenizer.DefaultModelName, Messages: first, Tools: []openai.ChatCompletionToolUnionParam{weatherTool}}

	// Non-streaming.
	out, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	ch := out.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
		t.Fatalf("finish %q, calls %+v", ch.FinishReason, ch.Message.ToolCalls)
	}
	tc := ch.Message.ToolCalls[0]
	if tc.Function.Name != "get_weather" || tc.Function.Arguments != `{"city": "Paris", "unit": "celsius"}` || !strings.HasPrefix(tc.ID, "call_") || tc.Type != "function" {
		t.Fatalf("call %+v", tc)
	}
	if ch.Message.Content != "" || !ch.Message.JSON.Content.Valid() && ch.Message.JSON.Content.Raw() != "null" {
		t.Fatalf("content %q (raw %s), want null", ch.Message.Content, ch.Message.JSON.Content.Raw())
	}
	var raw struct {
		Choices []struct {
			Message struct {
				ReasoningContent string `json:"reasoning_content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			Details struct {
				Reasoning int `json:"reasoning_tokens"`
			} `json:"completion_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(out.RawJSON()), &raw); err != nil {
		t.Fatal(err)
	}
	if raw.Choices[0].Message.ReasoningContent != "I should call the tool." || raw.Usage.Details.Reasoning == 0 || raw.Usage.Details.Reasoning >= int(out.Usage.CompletionTokens) {
		t.Fatalf("reasoning %q, %d reasoning of %d tokens", raw.Choices[0].Message.ReasoningContent, raw.Usage.Details.Reasoning, out.Usage.CompletionTokens)
	}

	// Streaming: the client's accumulator rebuilds the same call.
	stream := c.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	var reasoning strings.Builder
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		if len(chunk.Choices) > 0 {
			if f, ok := chunk.Choices[0].Delta.JSON.ExtraFields["reasoning_content"]; ok {
				var s string
				_ = json.Unmarshal([]byte(f.Raw()), &s)
				reasoning.WriteString(s)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	sc := acc.Choices[0]
	if sc.FinishReason != "tool_calls" || len(sc.Message.ToolCalls) != 1 || sc.Message.ToolCalls[0].Function.Name != "get_weather" ||
		sc.Message.ToolCalls[0].Function.Arguments != tc.Function.Arguments || sc.Message.ToolCalls[0].ID == "" {
		t.Fatalf("streamed: finish %q calls %+v", sc.FinishReason, sc.Message.ToolCalls)
	}
	if reasoning.String() != "I should call the tool." {
		t.Fatalf("streamed reasoning %q", reasoning.String())
	}

	// Second turn: the call and its result go back through the template.
	second := append(first, ch.Message.ToParam(), openai.ToolMessage(`{"temp": 21, "sky": "sunny"}`, tc.ID))
	out2, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: tokenizer.DefaultModelName, Messages: second, Tools: params.Tools})
	if err != nil {
		t.Fatal(err)
	}
	if m := out2.Choices[0].Message; out2.Choices[0].FinishReason != "stop" || m.Content != "It is sunny and 21C in Paris." || len(m.ToolCalls) != 0 {
		t.Fatalf("second turn: finish %q, message %+v", out2.Choices[0].FinishReason, m)
	}
}

// TestChatToolStreamShape reads the raw SSE: the call's first delta has
// index, id, type and name with empty arguments, later ones only argument
// text, and no content chunk carries the call's markup.
func TestChatToolStreamShape(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Workers = 1
	sys := startTest(t, cfg, scriptedEngines(t, toolScript))
	body := `{"model":"tandem-mock","stream":true,"messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}`
	resp, err := http.Post(sys.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var calls []map[string]any
	var content strings.Builder
	finish := ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content   string           `json:"content"`
					ToolCalls []map[string]any `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(line), &chunk); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		for _, c := range chunk.Choices {
			content.WriteString(c.Delta.Content)
			calls = append(calls, c.Delta.ToolCalls...)
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
	}
	if strings.Contains(content.String(), "tool_call") || finish != "tool_calls" || len(calls) < 2 {
		t.Fatalf("content %q finish %q calls %v", content.String(), finish, calls)
	}
	f0 := calls[0]["function"].(map[string]any)
	if calls[0]["index"].(float64) != 0 || calls[0]["id"] == nil || calls[0]["type"] != "function" || f0["name"] != "get_weather" || f0["arguments"] != "" {
		t.Fatalf("first delta %v", calls[0])
	}
	for _, c := range calls[1:] {
		if _, ok := c["id"]; ok {
			t.Fatalf("later delta repeats the id: %v", c)
		}
	}
}

// TestChatToolChoiceChecks: tool_choice is validated as OpenAI does.
func TestChatToolChoiceChecks(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Workers = 1
	sys := startTest(t, cfg, scriptedEngines(t, toolScript))
	tools := `"tools":[{"type":"function","function":{"name":"get_weather"}}]`
	for _, c := range []struct{ body, param string }{
		{`{"model":"tandem-mock","messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`, "tool_choice"},
		{`{"model":"tandem-mock","messages":[{"role":"user","content":"x"}],` + tools + `,"tool_choice":{"type":"function","function":{"name":"nope"}}}`, "tool_choice"},
		{`{"model":"tandem-mock","messages":[{"role":"user","content":"x"}],` + tools + `,"tool_choice":"sometimes"}`, "tool_choice"},
		{`{"model":"tandem-mock","messages":[{"role":"user","content":"x"}],"reasoning_effort":"extreme"}`, "reasoning_effort"},
	} {
		resp, err := http.Post(sys.URL()+"/v1/chat/completions", "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct {
				Param string `json:"param"`
			} `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != 400 || e.Error.Param != c.param {
			t.Errorf("%s: %d param %q", c.body, resp.StatusCode, e.Error.Param)
		}
	}
	// tool_choice none: the call stays text.
	resp, err := http.Post(sys.URL()+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"tandem-mock","messages":[{"role":"user","content":"weather"}],`+tools+`,"tool_choice":"none"}`))
	if err != nil {
		t.Fatal(err)
	}
	var out openai.ChatCompletion
	_ = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if len(out.Choices) != 1 || !strings.Contains(out.Choices[0].Message.Content, "<tool_call>") || out.Choices[0].FinishReason != "stop" {
		t.Fatalf("tool_choice none: %+v", out.Choices)
	}
}

// TestChatToolsQwen3Template: with the real Qwen3 tokenizer and chat
// template (skipped when not cached), the parsers are detected from the
// template (hermes tool calls, qwen3 reasoning), <|im_end|> stays out of the
// text, and enable_thinking=false (chat_template_kwargs) gives plain content.
func TestChatToolsQwen3Template(t *testing.T) {
	dir, err := sharedfiles.Qwen3Tokenizer()
	if err != nil {
		t.Skip(err)
	}
	model, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	script := `{"rules":[{"when":"weather","reply":"<think>\nCall the tool.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"},{"when":"","reply":"Hello."}]}`
	cfg := DefaultConfig()
	cfg.Workers, cfg.HTTPAddr = 1, "127.0.0.1:0"
	sys, err := Start(cfg, model, scriptedEngines(t, script)(model), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Shutdown(context.Background()) })
	post := func(body string) map[string]any {
		resp, err := http.Post(sys.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%d %v %v", resp.StatusCode, err, out)
		}
		return out
	}
	name := model.Name
	out := post(`{"model":"` + name + `","messages":[{"role":"user","content":"weather in Paris?"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}`)
	ch := out["choices"].([]any)[0].(map[string]any)
	msg := ch["message"].(map[string]any)
	calls, _ := msg["tool_calls"].([]any)
	if ch["finish_reason"] != "tool_calls" || len(calls) != 1 || msg["reasoning_content"] != "\nCall the tool.\n" || msg["content"] != nil {
		t.Fatalf("reply %v", ch)
	}
	out = post(`{"model":"` + name + `","messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false}}`)
	msg = out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if msg["content"] != "Hello." || msg["reasoning_content"] != nil {
		t.Fatalf("enable_thinking false: %v", msg)
	}
}

// TestChatParallelToolCalls: two calls in one reply come back as two, with
// indexes 0 and 1; parallel_tool_calls false keeps the first.
func TestChatParallelToolCalls(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Workers = 1
	two := `<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>`
	sys := startTest(t, cfg, scriptedEngines(t, `{"rules":[{"when":"","reply":"`+two+`"}]}`))
	c := openai.NewClient(option.WithBaseURL(sys.URL()+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
	for _, parallel := range []bool{true, false} {
		params := openai.ChatCompletionNewParams{Model: tokenizer.DefaultModelName, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("both")},
			Tools: []openai.ChatCompletionToolUnionParam{weatherTool}}
		if !parallel {
			params.ParallelToolCalls = openai.Bool(false)
		}
		want := 2
		if !parallel {
			want = 1
		}
		out, err := c.Chat.Completions.New(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		if calls := out.Choices[0].Message.ToolCalls; len(calls) != want || calls[0].Function.Arguments != `{"city": "Paris"}` || calls[len(calls)-1].ID == calls[0].ID && want == 2 {
			t.Fatalf("parallel %v: %+v", parallel, calls)
		}
		stream := c.Chat.Completions.NewStreaming(context.Background(), params)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if calls := acc.Choices[0].Message.ToolCalls; len(calls) != want || calls[want-1].Function.Arguments == "" {
			t.Fatalf("streamed, parallel %v: %+v", parallel, calls)
		}
	}
}
