package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	oresponses "github.com/openai/openai-go/v3/responses"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
)

// sseNames reads an SSE body and returns its event names and data values.
func sseNames(t *testing.T, body io.Reader) (names []string, data []string) {
	t.Helper()
	sc := bufio.NewScanner(body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, n)
		} else if d, ok := strings.CutPrefix(line, "data: "); ok {
			data = append(data, d)
		}
	}
	return names, data
}

func TestResponsesWithOfficialSDK(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: append(toks("Hello there"), tokEnd), EOS: []engine.Token{tokEnd}, Cached: 4}
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": eng})
	c := client(f.url)
	ctx := context.Background()

	r, err := c.Responses.New(ctx, oresponses.ResponseNewParams{Model: "m", Instructions: openai.String("be brief"),
		Input: oresponses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	if r.OutputText() != "Hello there" || r.Status != "completed" || !strings.HasPrefix(r.ID, "resp_") {
		t.Fatalf("response %q status %s id %s", r.OutputText(), r.Status, r.ID)
	}
	if r.Usage.OutputTokens != 12 || r.Usage.InputTokensDetails.CachedTokens != 4 || r.Usage.InputTokens == 0 {
		t.Fatalf("usage %+v", r.Usage)
	}
	if got := eng.Seen[0].Prompt; !strings.Contains((byteTok{}).Decode(got), "system\nbe brief") {
		t.Fatalf("instructions not in the prompt: %q", byteTok{}.Decode(got))
	}

	// previous_response_id: the stored turn comes before the new input;
	// the first response's instructions do not carry over.
	r2, err := c.Responses.New(ctx, oresponses.ResponseNewParams{Model: "m", PreviousResponseID: openai.String(r.ID),
		Input: oresponses.ResponseNewParamsInputUnion{OfString: openai.String("again")}})
	if err != nil {
		t.Fatal(err)
	}
	prompt := byteTok{}.Decode(eng.Seen[1].Prompt)
	if want := "user\nhi<|im_end|>\n<|im_start|>assistant\nHello there<|im_end|>\n<|im_start|>user\nagain"; !strings.Contains(prompt, want) || strings.Contains(prompt, "be brief") {
		t.Fatalf("second prompt %q", prompt)
	}
	got, err := c.Responses.Get(ctx, r2.ID, oresponses.ResponseGetParams{})
	if err != nil || got.OutputText() != "Hello there" {
		t.Fatalf("GET stored response: %v %+v", err, got)
	}

	// Streaming: the event sequence of one text message.
	st := c.Responses.NewStreaming(ctx, oresponses.ResponseNewParams{Model: "m", Input: oresponses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	var types []string
	var text strings.Builder
	var final oresponses.Response
	for st.Next() {
		ev := st.Current()
		if len(types) == 0 || types[len(types)-1] != ev.Type {
			types = append(types, ev.Type)
		}
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			final = ev.Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	want := "response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta " +
		"response.output_text.done response.content_part.done response.output_item.done response.completed"
	if strings.Join(types, " ") != want {
		t.Fatalf("events\n got %s\nwant %s", strings.Join(types, " "), want)
	}
	if text.String() != "Hello there" || final.OutputText() != "Hello there" || final.Usage.OutputTokens != 12 {
		t.Fatalf("streamed %q, final %q usage %+v", text.String(), final.OutputText(), final.Usage)
	}
	if n := testutil.ToFloat64(f.srv.metrics.requests.WithLabelValues("responses", "m", "200")); n != 3 {
		t.Fatalf("tandem_frontend_requests_total{endpoint=responses,status=200} = %v, want 3", n)
	}
}

func TestResponsesErrors(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: toks("x")}
	f := newFixture(t, 64, map[string]engine.Generator{"w0": eng})
	cases := []struct {
		body   string
		status int
		param  string
		code   string
	}{
		{`{"model":"m","input":"hi","previous_response_id":"resp_gone"}`, 404, "previous_response_id", "previous_response_not_found"},
		{`{"model":"nope","input":"hi"}`, 404, "model", "model_not_found"},
		{`{"model":"m","input":"hi","max_output_tokens":1000}`, 400, "max_output_tokens", "context_length_exceeded"},
		{`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, 400, "input[0].content[0].type", "unsupported_value"},
		{`{"model":"m","input":"hi","background":true}`, 400, "background", "unsupported_value"},
	}
	for _, tc := range cases {
		resp := post(t, f.url+"/v1/responses", tc.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct{ Message, Type, Param, Code string }
		}
		_ = json.Unmarshal(b, &e)
		if resp.StatusCode != tc.status || e.Error.Param != tc.param || e.Error.Code != tc.code {
			t.Errorf("%s: %d %s", tc.body, resp.StatusCode, b)
		}
	}
	resp := post(t, f.url+"/v1/responses", `{"model":"m","input":"hi","previous_response_id":"resp_gone"}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "--responses-store-size") {
		t.Errorf("a gone response's error should name the store's bounds: %s", b)
	}
}

func TestMessagesNonStreamingAndStreaming(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: append(toks("Hi!"), tokEnd), EOS: []engine.Token{tokEnd}, Cached: 2}
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": eng})
	body := `{"model":"m","max_tokens":50,"system":"sys","messages":[{"role":"user","content":[{"type":"text","text":"hello"}]}]}`
	resp := post(t, f.url+"/v1/messages", body, "anthropic-version", "2023-06-01")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var m struct {
		ID, Type, Role, Model string
		Content               []struct{ Type, Text string }
		StopReason            string `json:"stop_reason"`
		Usage                 struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
			CacheRead    int `json:"cache_read_input_tokens"`
		}
	}
	if err := json.Unmarshal(b, &m); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if m.Type != "message" || !strings.HasPrefix(m.ID, "msg_") || len(m.Content) != 1 || m.Content[0].Text != "Hi!" || m.StopReason != "end_turn" ||
		m.Usage.OutputTokens != 4 || m.Usage.CacheRead != 2 || m.Usage.InputTokens+m.Usage.CacheRead != len(eng.Seen[0].Prompt) {
		t.Fatalf("message %s", b)
	}
	if p := (byteTok{}).Decode(eng.Seen[0].Prompt); !strings.HasPrefix(p, "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nhello") {
		t.Fatalf("prompt %q", p)
	}

	// A stop sequence ends the message there and is reported.
	resp = post(t, f.url+"/v1/messages", strings.Replace(body, `"max_tokens":50`, `"max_tokens":50,"stop_sequences":["!"]`, 1))
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"content":[{"type":"text","text":"Hi"}],"stop_reason":"stop_sequence","stop_sequence":"!"`) {
		t.Fatalf("stop sequence: %s", b)
	}

	resp = post(t, f.url+"/v1/messages", strings.Replace(body, `"max_tokens":50`, `"max_tokens":2,"stream":true`, 1))
	names, data := sseNames(t, resp.Body)
	resp.Body.Close()
	// The engine's pipe may merge the two tokens into one delta.
	names = slices.Compact(names)
	want := "message_start ping content_block_start content_block_delta content_block_stop message_delta message_stop"
	if resp.Header.Get("Content-Type") != "text/event-stream" || strings.Join(names, " ") != want {
		t.Fatalf("events\n got %s\nwant %s", strings.Join(names, " "), want)
	}
	if !strings.Contains(data[0], `"input_tokens":`) || !strings.Contains(data[len(data)-2], `"stop_reason":"max_tokens"`) {
		t.Fatalf("message_start %s / message_delta %s", data[0], data[len(data)-2])
	}
}

func TestMessagesErrorsAndAuth(t *testing.T) {
	cfg := DefaultConfig()
	keys, err := ParseAPIKeys([]byte("sk-0123456789abcdef\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.APIKeys = keys
	f := newFixtureCfg(t, cfg, 64, map[string]engine.Generator{"w0": &enginetest.Scripted{Name: "m", Output: toks("x")}})
	ok := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	cases := []struct {
		body, key string
		status    int
		typ, msg  string
	}{
		{ok, "", 401, "authentication_error", ""},
		{ok, "wrong-key-wrong-key", 401, "authentication_error", ""},
		{ok, "sk-0123456789abcdef", 200, "", ""},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"x"}}]}]}`, "sk-0123456789abcdef", 400, "invalid_request_error", "messages[0].content[0].type: "},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "sk-0123456789abcdef", 400, "invalid_request_error", "max_tokens: "},
		{`{"model":"m","max_tokens":500,"messages":[{"role":"user","content":"hi"}]}`, "sk-0123456789abcdef", 400, "invalid_request_error", "max_tokens: "},
		{`{"model":"nope","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "sk-0123456789abcdef", 404, "not_found_error", "model: "},
	}
	for _, tc := range cases {
		var hdr []string
		if tc.key != "" {
			hdr = []string{"x-api-key", tc.key, "anthropic-version", "2023-06-01"}
		}
		resp := post(t, f.url+"/v1/messages", tc.body, hdr...)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %s", tc.body, resp.StatusCode, b)
			continue
		}
		if tc.status == 200 {
			continue
		}
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal(b, &e); err != nil || e.Type != "error" || e.Error.Type != tc.typ || !strings.HasPrefix(e.Error.Message, tc.msg) {
			t.Errorf("%s: %s", tc.body, b)
		}
	}
	// The OpenAI routes take x-api-key too.
	req, _ := http.NewRequest("GET", f.url+"/v1/models", nil)
	req.Header.Set("x-api-key", "sk-0123456789abcdef")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /v1/models with x-api-key: %v %v", err, resp.Status)
	}
	resp.Body.Close()
}

// TestTranslatedMidStreamErrors: a worker that dies after its first token
// ends a Responses stream with response.failed and a Messages stream with
// Anthropic's error event; without streaming, both answer an error
// status.
func TestTranslatedMidStreamErrors(t *testing.T) {
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": brokenWorker{}})
	resp := post(t, f.url+"/v1/responses", `{"model":"m","input":"x","stream":true}`)
	names, data := sseNames(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(names) == 0 || names[len(names)-1] != "response.failed" ||
		!strings.Contains(data[len(data)-1], `"status":"failed","error":{"code":"stream_interrupted"`) {
		t.Fatalf("responses: %d %v %s", resp.StatusCode, names, data)
	}
	resp = post(t, f.url+"/v1/messages", `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"x"}],"stream":true}`)
	names, data = sseNames(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(names) == 0 || names[len(names)-1] != "error" ||
		!strings.Contains(data[len(data)-1], `{"type":"error","error":{"type":"overloaded_error"`) {
		t.Fatalf("messages: %d %v %s", resp.StatusCode, names, data)
	}
	for _, c := range []struct{ path, body, want string }{
		{"/v1/responses", `{"model":"m","input":"x"}`, `"code":"stream_interrupted"`},
		{"/v1/messages", `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"x"}]}`, `"type":"overloaded_error"`},
	} {
		resp := post(t, f.url+c.path, c.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %s", c.path, resp.StatusCode, b)
		}
	}
}

// TestTranslatedToolCalls: a Hermes tool call the engine writes comes back
// as a Responses function_call item (whole and streamed) and as an
// Anthropic tool_use block, through the chat parser.
func TestTranslatedToolCalls(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ToolCallParser = "hermes"
	reply := `<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>`
	eng := &enginetest.Scripted{Name: "m", Output: append(toks(reply), tokEnd), EOS: []engine.Token{tokEnd}}
	f := newFixtureCfg(t, cfg, 4096, map[string]engine.Generator{"w0": eng})

	body := `{"model":"m","input":"weather?","tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]}`
	resp := post(t, f.url+"/v1/responses", body)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var r struct {
		Status string
		Output []struct {
			Type, Name, Arguments string
			CallID                string `json:"call_id"`
		}
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Status != "completed" || len(r.Output) != 1 || r.Output[0].Type != "function_call" ||
		r.Output[0].Name != "get_weather" || r.Output[0].Arguments != `{"city": "Paris"}` || r.Output[0].CallID == "" {
		t.Fatalf("responses: %s", b)
	}

	resp = post(t, f.url+"/v1/responses", strings.Replace(body, `"input"`, `"stream":true,"input"`, 1))
	names, _ := sseNames(t, resp.Body)
	resp.Body.Close()
	got := strings.Join(slices.Compact(names), " ")
	if want := "response.created response.in_progress response.output_item.added response.function_call_arguments.delta " +
		"response.function_call_arguments.done response.output_item.done response.completed"; got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}

	resp = post(t, f.url+"/v1/messages", `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"weather?"}],`+
		`"tools":[{"name":"get_weather","input_schema":{"type":"object"}}]}`)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"name":"get_weather","input":{"city":"Paris"}}],"stop_reason":"tool_use"`) {
		t.Fatalf("messages: %s", b)
	}
}
