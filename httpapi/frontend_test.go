package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
	"github.com/tandemllm/tandem/health"
)

func client(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("test"), option.WithMaxRetries(0))
}

func TestChatWithOfficialSDK(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: toks("Hello there"), EOS: []engine.Token{tokEnd}, Cached: 4}
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": eng})
	c := client(f.url)
	ctx := context.Background()

	resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(5),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "Hello" || resp.Choices[0].FinishReason != "length" {
		t.Fatalf("content %q finish %q", got, resp.Choices[0].FinishReason)
	}
	wantPrompt := len(toks("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"))
	if resp.Usage.PromptTokens != int64(wantPrompt) || resp.Usage.CompletionTokens != 5 || resp.Usage.PromptTokensDetails.CachedTokens != 4 {
		t.Fatalf("usage %+v", resp.Usage)
	}
	if got := eng.Requests()[0]; len(got.Prompt) != wantPrompt || got.MaxTokens != 5 {
		t.Fatalf("engine saw %+v", got)
	}
}

func TestChatStreamingWithUsage(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: append(toks("abc"), tokEnd), EOS: []engine.Token{tokEnd}, Cached: 3}
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": eng})
	c := client(f.url)
	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var text strings.Builder
	var finish string
	var usage *openai.CompletionUsage
	for stream.Next() {
		ch := stream.Current()
		if len(ch.Choices) == 0 {
			u := ch.Usage
			usage = &u
			continue
		}
		text.WriteString(ch.Choices[0].Delta.Content)
		if ch.Choices[0].FinishReason != "" {
			finish = ch.Choices[0].FinishReason
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != "abc" || finish != "stop" {
		t.Fatalf("text %q finish %q (EOS must not be rendered)", text.String(), finish)
	}
	if usage == nil || usage.CompletionTokens != 4 || usage.PromptTokensDetails.CachedTokens != 3 {
		t.Fatalf("usage %+v", usage)
	}
}

func TestCompletionsAndStopStrings(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: toks("one two END three")}
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": eng})
	c := client(f.url)
	ctx := context.Background()
	resp, err := c.Completions.New(ctx, openai.CompletionNewParams{
		Model: "m", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("go")},
		Stop: openai.CompletionNewParamsStopUnion{OfString: openai.String("END")}, MaxTokens: openai.Int(100),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Text != "one two " || resp.Choices[0].FinishReason != "stop" {
		t.Fatalf("got %q %q", resp.Choices[0].Text, resp.Choices[0].FinishReason)
	}
	// Streaming: the partial "E", "EN" must be held back, never sent.
	stream := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model: "m", Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{103, 111}},
		Stop: openai.CompletionNewParamsStopUnion{OfStringArray: []string{"xyz", "END"}}, MaxTokens: openai.Int(100),
	})
	var pieces []string
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 && ch.Choices[0].Text != "" {
			pieces = append(pieces, ch.Choices[0].Text)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(pieces, "") != "one two " {
		t.Fatalf("pieces %q", pieces)
	}
	for _, p := range pieces {
		if strings.Contains(p, "E") {
			t.Fatalf("a piece of the stop string leaked: %q", pieces)
		}
	}
}

func TestErrorsWithOfficialSDK(t *testing.T) {
	f := newFixture(t, 64, map[string]engine.Generator{"w0": &enginetest.Scripted{Name: "m", Output: toks("x")}})
	c := client(f.url)
	ctx := context.Background()
	tests := []struct {
		name   string
		params openai.ChatCompletionNewParams
		status int
		param  string
		code   string
	}{
		{"unknown model", openai.ChatCompletionNewParams{Model: "nope", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}, 404, "model", "model_not_found"},
		{"bad temperature", openai.ChatCompletionNewParams{Model: "m", Temperature: openai.Float(9), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}, 400, "temperature", "invalid_value"},
		{"n=129", openai.ChatCompletionNewParams{Model: "m", N: openai.Int(129), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}, 400, "n", "invalid_value"},
		{"prompt too long", openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("a", 100))}}, 413, "messages", "context_length_exceeded"},
		{"max_tokens over context", openai.ChatCompletionNewParams{Model: "m", MaxTokens: openai.Int(60), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}, 400, "max_tokens", "context_length_exceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Chat.Completions.New(ctx, tc.params)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v", err)
			}
			if apiErr.StatusCode != tc.status || apiErr.Param != tc.param || apiErr.Code != tc.code || apiErr.Message == "" {
				t.Fatalf("got %d param=%q code=%q msg=%q", apiErr.StatusCode, apiErr.Param, apiErr.Code, apiErr.Message)
			}
		})
	}
}

func post(t *testing.T, url, body string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestSSEBytesAndHeaders(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: toks("hi")}
	f := newFixture(t, 4096, map[string]engine.Generator{"w7": eng})
	resp := post(t, f.url+"/v1/chat/completions",
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`,
		"X-Request-Id", "req-42")
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("X-Tandem-Worker") != "w7" || resp.Header.Get("X-Request-Id") != "req-42" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("headers %v", resp.Header)
	}
	if eng.Requests()[0].ID != "req-42" {
		t.Fatalf("request id not propagated: %q", eng.Requests()[0].ID)
	}
	var created int64
	fmt.Sscanf(string(body[strings.Index(string(body), `"created":`)+10:]), "%d", &created)
	head := fmt.Sprintf(`data: {"id":"chatcmpl-req-42","object":"chat.completion.chunk","created":%d,"model":"m",`, created)
	want := head + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n" +
		head + `"choices":[{"index":0,"delta":{"content":"hi"},"logprobs":null,"finish_reason":null}]}` + "\n\n" +
		head + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]}` + "\n\n" +
		head + `"choices":[],"usage":{"prompt_tokens":` + fmt.Sprint(len(eng.Requests()[0].Prompt)) + `,"completion_tokens":2,"total_tokens":` + fmt.Sprint(len(eng.Requests()[0].Prompt)+2) + `,"prompt_tokens_details":{"cached_tokens":0}}}` + "\n\n" +
		"data: [DONE]\n\n"
	if string(body) != want {
		t.Fatalf("SSE bytes differ\n got: %s\nwant: %s", body, want)
	}
}

func TestUTF8NeverSplit(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: toks("é😀中")} // one token per byte
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": eng})
	resp := post(t, f.url+"/v1/completions", `{"model":"m","prompt":"x","max_tokens":9,"stream":true}`)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var all strings.Builder
	for sc.Scan() {
		line := strings.TrimPrefix(sc.Text(), "data: ")
		if line == "" || line == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct{ Text string } `json:"choices"`
		}
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			t.Fatal(err)
		}
		for _, c := range ch.Choices {
			if strings.ContainsRune(c.Text, utf8.RuneError) {
				t.Fatalf("broken UTF-8 emitted: %q", c.Text)
			}
			all.WriteString(c.Text)
		}
	}
	if all.String() != "é😀中" {
		t.Fatalf("got %q", all.String())
	}
}

func TestBodyLimitAndMalformed(t *testing.T) {
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": &enginetest.Scripted{Name: "m"}})
	f.srv.cfg.MaxBodyBytes = 100
	resp := post(t, f.url+"/v1/completions", `{"model":"m","prompt":"`+strings.Repeat("a", 200)+`"}`)
	if resp.StatusCode != 413 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	resp = post(t, f.url+"/v1/completions", `{"model":"m",`)
	var body struct{ Error map[string]any }
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != 400 || body.Error["type"] != "invalid_request_error" {
		t.Fatalf("status %d body %v", resp.StatusCode, body)
	}
	resp = post(t, f.url+"/v1/completions", `{"model":"m","prompt":[999999]}`)
	if resp.StatusCode != 400 {
		t.Fatalf("out-of-vocab token: status %d", resp.StatusCode)
	}
}

func TestNoWorkerIs503WithRetryAfter(t *testing.T) {
	f := newFixture(t, 4096, nil)
	resp := post(t, f.url+"/v1/completions", `{"model":"m","prompt":"x"}`)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d retry-after %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	h, _ := http.Get(f.url + "/health")
	if h.StatusCode != 503 {
		t.Fatalf("/health = %d with no workers", h.StatusCode)
	}
}

// deadWorker fails like a worker whose process died.
type deadWorker struct{ calls int }

func (d *deadWorker) Generate(context.Context, *engine.Request) (engine.Stream, error) {
	d.calls++
	return nil, fmt.Errorf("dial: %w", engine.ErrUnavailable)
}

func TestRetryOnDeadWorkerBeforeFirstToken(t *testing.T) {
	dead := &deadWorker{}
	live := &enginetest.Scripted{Name: "m", Output: toks("ok")}
	f := newFixture(t, 4096, map[string]engine.Generator{"a-dead": dead, "b-live": live})
	for i := 0; i < 4; i++ {
		resp := post(t, f.url+"/v1/completions", `{"model":"m","prompt":"x","max_tokens":2}`)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || resp.Header.Get("X-Tandem-Worker") != "b-live" {
			t.Fatalf("status %d worker %q: %s", resp.StatusCode, resp.Header.Get("X-Tandem-Worker"), b)
		}
	}
	if dead.calls == 0 {
		t.Fatal("dead worker never tried; the test proves nothing")
	}
}

// brokenStream yields one token, then fails like a worker killed mid-stream.
type brokenStream struct{ n int }

func (b *brokenStream) Recv() (engine.Delta, error) {
	b.n++
	if b.n == 1 {
		return engine.Delta{Tokens: toks("a"), PromptTokens: 1}, nil
	}
	return engine.Delta{}, fmt.Errorf("connection reset: %w", engine.ErrUnavailable)
}

type brokenWorker struct{}

func (brokenWorker) Generate(context.Context, *engine.Request) (engine.Stream, error) {
	return &brokenStream{}, nil
}

func TestMidStreamErrorIsAnEvent(t *testing.T) {
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": brokenWorker{}})
	resp := post(t, f.url+"/v1/completions", `{"model":"m","prompt":"x","stream":true}`)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status changed to %d", resp.StatusCode)
	}
	s := string(body)
	if !strings.Contains(s, `data: {"error":{"message":`) || !strings.HasSuffix(s, "data: [DONE]\n\n") {
		t.Fatalf("body %s", s)
	}
}

func TestClientDisconnectCancelsEngine(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: toks("z"), Delay: 2 * time.Millisecond, Ctx: 1 << 20}
	f := newFixture(t, 1<<20, map[string]engine.Generator{"w0": eng})
	ctx, cancel := context.WithCancel(context.Background())
	c := client(f.url)
	stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(100000),
	})
	for i := 0; i < 3 && stream.Next(); i++ {
	}
	if eng.Live.Load() != 1 {
		t.Fatalf("engine not running: %d", eng.Live.Load())
	}
	cancel()
	stream.Close()
	deadline := time.Now().Add(100 * time.Millisecond)
	for eng.Live.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("engine still generating 100 ms after the client left")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestHealthModelsMetrics(t *testing.T) {
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": &enginetest.Scripted{Name: "m", Output: toks("x")}})
	resp := post(t, f.url+"/v1/completions", `{"model":"m","prompt":"x","max_tokens":1}`)
	resp.Body.Close()

	var rep healthReport
	h, _ := http.Get(f.url + "/health")
	_ = json.NewDecoder(h.Body).Decode(&rep)
	if h.StatusCode != 200 || rep.Status != "ok" || len(rep.Workers) != 1 {
		t.Fatalf("health %d %+v", h.StatusCode, rep)
	}
	f.board.Raise("kv_events_missing", "w0", health.Error, "no events")
	h, _ = http.Get(f.url + "/health")
	_ = json.NewDecoder(h.Body).Decode(&rep)
	if h.StatusCode != 200 || rep.Status != "degraded" || rep.Diagnostics[0].Code != "kv_events_missing" {
		t.Fatalf("degraded health %d %+v", h.StatusCode, rep)
	}
	f.srv.SetDraining()
	if h, _ = http.Get(f.url + "/health"); h.StatusCode != 503 {
		t.Fatalf("draining health %d", h.StatusCode)
	}

	c := client(f.url)
	models, err := c.Models.List(context.Background())
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != "m" {
		t.Fatalf("models %+v %v", models, err)
	}
	m, _ := http.Get(f.url + "/metrics")
	b, _ := io.ReadAll(m.Body)
	for _, name := range []string{
		`tandem_frontend_requests_total{endpoint="completions",model="m",status="200"} 1`,
		"tandem_frontend_time_to_first_token_seconds_bucket", "tandem_frontend_inflight_requests",
		"tandem_frontend_input_sequence_tokens", "tandem_frontend_output_sequence_tokens", "tandem_frontend_queued_requests",
		"tandem_frontend_inter_token_latency_seconds",
	} {
		if !strings.Contains(string(b), name) {
			t.Errorf("metrics lack %s", name)
		}
	}
}

// Chat, and Responses and Messages through chat's path, all reach the
// dispatch layer: a worker dead before the first token is retried on
// another for each of them.
func TestEveryEndpointDispatches(t *testing.T) {
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`},
		{"/v1/completions", `{"model":"m","prompt":"x","max_tokens":2}`},
		{"/v1/responses", `{"model":"m","store":false,"input":"hi","max_output_tokens":2}`},
		{"/v1/messages", `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			dead := &deadWorker{}
			live := &enginetest.Scripted{Name: "m", Output: toks("ok")}
			f := newFixture(t, 4096, map[string]engine.Generator{"a-dead": dead, "b-live": live})
			resp := post(t, f.url+tc.path, tc.body)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || dead.calls != 1 || live.Started.Load() != 1 {
				t.Fatalf("status %d, dead worker tried %d times, live %d: %s", resp.StatusCode, dead.calls, live.Started.Load(), b)
			}
		})
	}
}
