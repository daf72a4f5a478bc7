package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
	"github.com/tandemllm/tandem/engine/mocker"
)

// firstDeltas records each stream's first Delta, to see what the engine
// found in its prefix cache.
type firstDeltas struct {
	engine.Generator
	mu     sync.Mutex
	cached []int
	reqs   []engine.Request
}

type recStream struct {
	engine.Stream
	g    *firstDeltas
	seen bool
}

func (g *firstDeltas) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	g.mu.Lock()
	g.reqs = append(g.reqs, *req)
	g.mu.Unlock()
	st, err := g.Generator.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	return &recStream{Stream: st, g: g}, nil
}

func (s *recStream) Recv() (engine.Delta, error) {
	d, err := s.Stream.Recv()
	if err == nil && !s.seen {
		s.seen = true
		s.g.mu.Lock()
		s.g.cached = append(s.g.cached, d.CachedTokens)
		s.g.mu.Unlock()
	}
	return d, err
}

func mockerFixture(t *testing.T) (*fixture, *firstDeltas) {
	t.Helper()
	e, err := mocker.New(mocker.Config{Model: "m", Instant: true, Vocabulary: toks("Hello, world! Logprobs are here."), EOS: []engine.Token{tokEnd},
		Logger: quietLog(), BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	g := &firstDeltas{Generator: e}
	return newFixture(t, 4096, map[string]engine.Generator{"w0": g}), g
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestChatLogprobsWithOfficialSDK: the openai SDK reads chat logprobs in
// OpenAI's shape, non-streaming and streaming: one entry per generated
// token, whose texts make up the content, with its bytes and top
// alternatives (the chosen token first: the mocker makes it the likeliest).
func TestChatLogprobsWithOfficialSDK(t *testing.T) {
	f, _ := mockerFixture(t)
	c := client(f.url)
	params := openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(9),
		Logprobs: openai.Bool(true), TopLogprobs: openai.Int(3),
	}
	resp, err := c.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	ch := resp.Choices[0]
	content := ch.Logprobs.Content
	if int64(len(content)) != resp.Usage.CompletionTokens || len(content) != 9 {
		t.Fatalf("%d logprobs for %d tokens", len(content), resp.Usage.CompletionTokens)
	}
	var text strings.Builder
	for _, lp := range content {
		text.WriteString(lp.Token)
		if lp.Logprob >= 0 || len(lp.TopLogprobs) != 3 || lp.TopLogprobs[0].Token != lp.Token || string(bytesOf(lp.Bytes)) != lp.Token {
			t.Fatalf("entry %+v", lp)
		}
	}
	if text.String() != ch.Message.Content {
		t.Fatalf("tokens %q, content %q", text.String(), ch.Message.Content)
	}

	stream := c.Chat.Completions.NewStreaming(context.Background(), params)
	var streamed []openai.ChatCompletionTokenLogprob
	text.Reset()
	for stream.Next() {
		for _, chc := range stream.Current().Choices {
			text.WriteString(chc.Delta.Content)
			streamed = append(streamed, chc.Logprobs.Content...)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(streamed) != len(content) || text.String() != ch.Message.Content {
		t.Fatalf("streamed %d entries, text %q", len(streamed), text.String())
	}
	for i := range streamed {
		if streamed[i].Token != content[i].Token || streamed[i].Logprob != content[i].Logprob {
			t.Fatalf("entry %d: streamed %+v, collected %+v", i, streamed[i], content[i])
		}
	}
	// Without logprobs asked for, "logprobs" is null.
	params.Logprobs, params.TopLogprobs = openai.Bool(false), openai.Int(0)
	resp, err = c.Chat.Completions.New(context.Background(), params)
	if err != nil || resp.Choices[0].JSON.Logprobs.Raw() != "null" {
		t.Fatalf("logprobs %q, %v", resp.Choices[0].JSON.Logprobs.Raw(), err)
	}
}

func bytesOf(b []int64) []byte {
	out := make([]byte, len(b))
	for i, v := range b {
		out[i] = byte(v)
	}
	return out
}

type completionLP struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type completionChunk struct {
	Choices []struct {
		Index        int           `json:"index"`
		Text         string        `json:"text"`
		Logprobs     *completionLP `json:"logprobs"`
		FinishReason *string       `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
		PromptTokens     int `json:"prompt_tokens"`
	} `json:"usage"`
}

func lpPost(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// sseChunks reads an SSE body into its JSON chunks (until [DONE]).
func lpChunks(t *testing.T, r io.Reader) []completionChunk {
	t.Helper()
	var out []completionChunk
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			return out
		}
		var c completionChunk
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("chunk %s: %v", line, err)
		}
		out = append(out, c)
	}
	t.Fatal("no [DONE]")
	return nil
}

// TestCompletionLogprobsShape: completions' legacy logprobs object, whole
// and streamed: tokens that make up the text, their logprobs, each
// position's top object naming the chosen token (and logprobs=2 more),
// and text offsets that run on across chunks.
func TestCompletionLogprobsShape(t *testing.T) {
	f, _ := mockerFixture(t)
	body := `{"model":"m","prompt":"Say something","max_tokens":7,"logprobs":2}`
	resp := lpPost(t, f.url+"/v1/completions", body)
	var whole completionChunk
	if err := json.NewDecoder(resp.Body).Decode(&whole); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, err)
	}
	check := func(name, text string, lp *completionLP) {
		t.Helper()
		if lp == nil || len(lp.Tokens) != 7 || len(lp.TokenLogprobs) != 7 || len(lp.TopLogprobs) != 7 || len(lp.TextOffset) != 7 {
			t.Fatalf("%s: %+v", name, lp)
		}
		off := 0
		for i, tok := range lp.Tokens {
			if lp.TextOffset[i] != off {
				t.Fatalf("%s: offset %d = %d, want %d", name, i, lp.TextOffset[i], off)
			}
			off += len([]rune(tok))
			if v, ok := lp.TopLogprobs[i][tok]; !ok || v != lp.TokenLogprobs[i] || len(lp.TopLogprobs[i]) > 3 || len(lp.TopLogprobs[i]) < 2 {
				t.Fatalf("%s: position %d: top %v, token %q %v", name, i, lp.TopLogprobs[i], tok, lp.TokenLogprobs[i])
			}
		}
		if strings.Join(lp.Tokens, "") != text {
			t.Fatalf("%s: tokens %q, text %q", name, lp.Tokens, text)
		}
	}
	check("whole", whole.Choices[0].Text, whole.Choices[0].Logprobs)

	resp = lpPost(t, f.url+"/v1/completions", strings.Replace(body, `"logprobs":2`, `"logprobs":2,"stream":true`, 1))
	var merged completionLP
	var text strings.Builder
	for _, c := range lpChunks(t, resp.Body) {
		for _, ch := range c.Choices {
			text.WriteString(ch.Text)
			if ch.Logprobs != nil {
				merged.Tokens = append(merged.Tokens, ch.Logprobs.Tokens...)
				merged.TokenLogprobs = append(merged.TokenLogprobs, ch.Logprobs.TokenLogprobs...)
				merged.TopLogprobs = append(merged.TopLogprobs, ch.Logprobs.TopLogprobs...)
				merged.TextOffset = append(merged.TextOffset, ch.Logprobs.TextOffset...)
			}
		}
	}
	check("streamed", text.String(), &merged)
	for i := range merged.TokenLogprobs {
		if merged.TokenLogprobs[i] != whole.Choices[0].Logprobs.TokenLogprobs[i] {
			t.Fatalf("position %d: streamed %v, whole %v", i, merged.TokenLogprobs[i], whole.Choices[0].Logprobs.TokenLogprobs[i])
		}
	}
}

// TestNChoices: n > 1 runs every choice on the one worker the request was
// routed to, the later ones finding the prompt in its prefix cache; each
// choice carries its index, streamed or not, and usage counts the prompt
// once and every choice's tokens.
func TestNChoices(t *testing.T) {
	f, g := mockerFixture(t)
	c := client(f.url)
	params := openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tell me a story about a robot")}, MaxTokens: openai.Int(6),
		N: openai.Int(3), Seed: openai.Int(7), Logprobs: openai.Bool(true),
	}
	resp, err := c.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 3 || resp.Usage.CompletionTokens != 18 {
		t.Fatalf("%d choices, usage %+v", len(resp.Choices), resp.Usage)
	}
	seen := map[string]bool{}
	for i, ch := range resp.Choices {
		if ch.Index != int64(i) || len(ch.Logprobs.Content) != 6 {
			t.Fatalf("choice %d: index %d, %d logprobs", i, ch.Index, len(ch.Logprobs.Content))
		}
		seen[ch.Message.Content] = true
	}
	if len(seen) < 2 {
		t.Fatalf("the choices are all %q: each must sample on its own", resp.Choices[0].Message.Content)
	}
	g.mu.Lock()
	reqs, cached := g.reqs, g.cached
	g.mu.Unlock()
	if len(reqs) != 3 || reqs[1].Sampling.Seed != 8 || reqs[2].Sampling.Seed != 9 {
		t.Fatalf("engine requests %+v", reqs)
	}
	for i := 1; i < 3; i++ {
		if cached[i] == 0 {
			t.Fatalf("choice %d found nothing of the prompt cached: %v", i, cached)
		}
	}

	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(4), N: openai.Int(2),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	texts, finishes := map[int64]string{}, map[int64]string{}
	var usage int64
	for stream.Next() {
		ch := stream.Current()
		if len(ch.Choices) == 0 {
			usage = ch.Usage.CompletionTokens
		}
		for _, c := range ch.Choices {
			texts[c.Index] += c.Delta.Content
			if c.FinishReason != "" {
				finishes[c.Index] = c.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(finishes) != 2 || finishes[0] != "length" || finishes[1] != "length" || usage != 8 || texts[0] == "" || texts[1] == "" {
		t.Fatalf("texts %v finishes %v usage %d", texts, finishes, usage)
	}
}

// TestLogprobsAsTokenIDs: vLLM's return_tokens_as_token_ids names every
// logprobs token "token_id:N", which is how engine/upstream reads ids back
// from a vLLM-compatible server, Tandem's own included.
func TestLogprobsAsTokenIDs(t *testing.T) {
	f, _ := mockerFixture(t)
	resp := lpPost(t, f.url+"/v1/completions", `{"model":"m","prompt":[72,105],"max_tokens":3,"logprobs":1,"return_tokens_as_token_ids":true,"return_token_ids":true}`)
	var v struct {
		Choices []struct {
			TokenIDs []int         `json:"token_ids"`
			Logprobs *completionLP `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	lp := v.Choices[0].Logprobs
	for i, id := range v.Choices[0].TokenIDs {
		name := "token_id:" + strconv.Itoa(id)
		if lp.Tokens[i] != name {
			t.Fatalf("position %d: %q, want %q", i, lp.Tokens[i], name)
		}
		if _, ok := lp.TopLogprobs[i][name]; !ok || len(lp.TopLogprobs[i]) > 2 {
			t.Fatalf("position %d: top %v", i, lp.TopLogprobs[i])
		}
	}
}

// TestNChoicesStopEachOnItsOwn: a stop string ends only the choice that
// wrote it; the others run to their own end.
func TestNChoicesStopEachOnItsOwn(t *testing.T) {
	f, _ := mockerFixture(t)
	c := client(f.url)
	// Seeds 3, 4, 5 start the mocker's vocabulary cycle at different
	// places; "world" ends whichever choices write it.
	resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(40),
		N: openai.Int(3), Seed: openai.Int(3), Stop: openai.ChatCompletionNewParamsStopUnion{OfString: openai.String("world")},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range resp.Choices {
		if strings.Contains(ch.Message.Content, "world") || ch.FinishReason != "stop" {
			t.Fatalf("choice %d: %q %s", ch.Index, ch.Message.Content, ch.FinishReason)
		}
	}
	if resp.Usage.CompletionTokens < 3 {
		t.Fatalf("usage %+v", resp.Usage)
	}
}

// TestLogprobsMissingFromEngine: an engine that sends tokens without the
// logprobs asked for still gets one entry per token, at vLLM's floor.
func TestLogprobsMissingFromEngine(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: toks("abc"), EOS: []engine.Token{tokEnd}}
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": eng})
	c := client(f.url)
	resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(3), Logprobs: openai.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	lps := resp.Choices[0].Logprobs.Content
	if len(lps) != 3 || lps[0].Token != "a" || lps[0].Logprob != -9999 || !eng.Requests()[0].Logprobs {
		t.Fatalf("%+v", lps)
	}
}
