package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
	"github.com/tandemllm/tandem/tokenizer"
)

// deltaScript replays fixed deltas, one per Recv, so a test chooses where
// the delta boundaries fall (Scripted's pipe hands over everything at once).
type deltaScript struct {
	deltas []engine.Delta
	mu     sync.Mutex
	seen   [][]engine.Token // the prompts
}

type replay struct {
	ds []engine.Delta
	i  int
}

func (r *replay) Recv() (engine.Delta, error) {
	if r.i == len(r.ds) {
		return engine.Delta{}, io.EOF
	}
	r.i++
	return r.ds[r.i-1], nil
}

func (g *deltaScript) Generate(_ context.Context, req *engine.Request) (engine.Stream, error) {
	g.mu.Lock()
	g.seen = append(g.seen, req.Prompt)
	g.mu.Unlock()
	ds := make([]engine.Delta, len(g.deltas))
	for i, d := range g.deltas {
		d.Tokens = slices.Clone(d.Tokens)
		d.PromptTokens = len(req.Prompt)
		ds[i] = d
	}
	return &replay{ds: ds}, nil
}

func (g *deltaScript) prompt() []engine.Token {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seen[len(g.seen)-1]
}

// dl is a delta of s's tokens (one per byte) followed by extra.
func dl(s string, finish engine.FinishReason, extra ...engine.Token) engine.Delta {
	return engine.Delta{Tokens: append(toks(s), extra...), Finish: finish}
}

// tokenIDsCases: what the client sees of each script, text and token_ids.
var tokenIDsCases = []struct {
	name   string
	stop   []string
	deltas []engine.Delta
	text   string
	ids    []engine.Token // the choice's token_ids, all chunks together
	finish string
}{
	{"a token a delta, EOS", nil, []engine.Delta{dl("h", engine.FinishNone), dl("i", engine.FinishNone), dl("", engine.FinishStop, tokEnd)},
		"hi", append(toks("hi"), tokEnd), "stop"},
	{"one delta, EOS", nil, []engine.Delta{dl("abc", engine.FinishStop, tokEnd)},
		"abc", append(toks("abc"), tokEnd), "stop"},
	{"length", nil, []engine.Delta{dl("ab", engine.FinishNone), dl("c", engine.FinishLength)},
		"abc", toks("abc"), "length"},
	{"only EOS", nil, []engine.Delta{dl("", engine.FinishStop, tokEnd)},
		"", []engine.Token{tokEnd}, "stop"},
	{"UTF-8 split across deltas", nil, []engine.Delta{{Tokens: toks("é")[:1]}, {Tokens: toks("é")[1:]}, dl("", engine.FinishStop, tokEnd)},
		"é", append(toks("é"), tokEnd), "stop"},
	{"stop string across deltas", []string{"END"}, []engine.Delta{dl("ab E", engine.FinishNone), dl("ND cd", engine.FinishLength)},
		"ab ", toks("ab END"), "stop"},
	{"stop string inside a delta, EOS after", []string{"END"}, []engine.Delta{dl("xxENDyy", engine.FinishStop, tokEnd)},
		"xx", toks("xxEND"), "stop"},
	{"stop string a token a delta", []string{"END"}, []engine.Delta{dl("a", engine.FinishNone), dl("E", engine.FinishNone), dl("N", engine.FinishNone), dl("D", engine.FinishNone), dl("z", engine.FinishLength)},
		"a", toks("aEND"), "stop"},
	{"held prefix flushed at EOS", []string{"END"}, []engine.Delta{dl("aE", engine.FinishNone), dl("N", engine.FinishStop, tokEnd)},
		"aEN", append(toks("aEN"), tokEnd), "stop"},
	{"multibyte stop string", []string{"é!"}, []engine.Delta{dl("caf", engine.FinishNone), dl("é!zz", engine.FinishLength)},
		"caf", toks("café!"), "stop"},
	{"earliest of several stops", []string{"yz", "b"}, []engine.Delta{dl("abyzq", engine.FinishLength)},
		"a", toks("ab"), "stop"},
}

// sseChunks returns the data payloads of an SSE body, [DONE] excluded.
func sseChunks(t *testing.T, body []byte) []map[string]json.RawMessage {
	t.Helper()
	var out []map[string]json.RawMessage
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("chunk %s: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// choiceOf returns a chunk's or response's only choice (nil for none).
func choiceOf(t *testing.T, m map[string]json.RawMessage) map[string]json.RawMessage {
	t.Helper()
	var cs []map[string]json.RawMessage
	if err := json.Unmarshal(m["choices"], &cs); err != nil || len(cs) > 1 {
		t.Fatalf("choices %s: %v", m["choices"], err)
	}
	if len(cs) == 0 {
		return nil
	}
	return cs[0]
}

// idsOf decodes a token-id array; present is false when the key is absent.
func idsOf(t *testing.T, m map[string]json.RawMessage, key string) (ids []engine.Token, present bool) {
	t.Helper()
	raw, ok := m[key]
	if !ok {
		return nil, false
	}
	if err := json.Unmarshal(raw, &ids); err != nil || ids == nil {
		t.Fatalf("%s = %s: want an array of ids (%v)", key, raw, err)
	}
	return ids, true
}

func str(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s *string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	if s == nil {
		return ""
	}
	return *s
}

// TestReturnTokenIDs runs every script on both endpoints, streamed and not,
// with and without return_token_ids: the text is the same either way; with
// the flag the ids come back in vLLM's shapes, every generated id exactly
// once, and without it no id field appears.
func TestReturnTokenIDs(t *testing.T) {
	for _, tc := range tokenIDsCases {
		for _, chat := range []bool{false, true} {
			for _, stream := range []bool{false, true} {
				for _, flag := range []bool{false, true} {
					name := fmt.Sprintf("%s/chat=%v/stream=%v/return_token_ids=%v", tc.name, chat, stream, flag)
					t.Run(name, func(t *testing.T) {
						eng := &deltaScript{deltas: tc.deltas}
						f := newFixture(t, 4096, map[string]engine.Generator{"w0": eng})
						req := map[string]any{"model": "m", "max_tokens": 50, "stream": stream}
						path := "/v1/completions"
						if chat {
							path = "/v1/chat/completions"
							req["messages"] = []map[string]string{{"role": "user", "content": "hi"}}
						} else {
							req["prompt"] = []int{104, 105}
						}
						if stream {
							req["stream_options"] = map[string]bool{"include_usage": true}
						}
						if tc.stop != nil {
							req["stop"] = tc.stop
						}
						if flag {
							req["return_token_ids"] = true
						}
						b, _ := json.Marshal(req)
						resp := post(t, f.url+path, string(b))
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 {
							t.Fatalf("status %d: %s", resp.StatusCode, body)
						}
						if !flag && strings.Contains(string(body), "token_ids") {
							t.Fatalf("ids without return_token_ids: %s", body)
						}
						prompt := eng.prompt()
						var text, finish strings.Builder
						var ids []engine.Token
						if !stream {
							var top map[string]json.RawMessage
							if err := json.Unmarshal(body, &top); err != nil {
								t.Fatal(err)
							}
							c := choiceOf(t, top)
							if chat {
								var msg struct{ Content string }
								_ = json.Unmarshal(c["message"], &msg)
								text.WriteString(msg.Content)
							} else {
								text.WriteString(str(t, c["text"]))
							}
							finish.WriteString(str(t, c["finish_reason"]))
							if flag {
								promptAt := c // completions: per choice
								if chat {
									promptAt = top // chat: top level
								}
								got, ok := idsOf(t, promptAt, "prompt_token_ids")
								if !ok || !slices.Equal(got, prompt) {
									t.Fatalf("prompt_token_ids %v, want %v: %s", got, prompt, body)
								}
								if ids, ok = idsOf(t, c, "token_ids"); !ok {
									t.Fatalf("no token_ids: %s", body)
								}
							}
						} else {
							for i, ch := range sseChunks(t, body) {
								c := choiceOf(t, ch)
								if c == nil {
									if _, ok := ch["usage"]; !ok {
										t.Fatalf("chunk %d has neither choices nor usage", i)
									}
									if _, ok := ch["prompt_token_ids"]; ok {
										t.Fatalf("usage chunk with prompt_token_ids")
									}
									continue
								}
								promptAt := c
								if chat {
									promptAt = ch
								}
								p, hasPrompt := idsOf(t, promptAt, "prompt_token_ids")
								if flag && i == 0 {
									if !hasPrompt || !slices.Equal(p, prompt) {
										t.Fatalf("first chunk: prompt_token_ids %v, want %v: %s", p, prompt, body)
									}
								} else if hasPrompt {
									t.Fatalf("chunk %d repeats prompt_token_ids: %s", i, body)
								}
								if _, ok := ch["prompt_token_ids"]; ok && !chat {
									t.Fatalf("completions: prompt_token_ids at the top level")
								}
								if _, ok := c["prompt_token_ids"]; ok && chat {
									t.Fatalf("chat: prompt_token_ids in the choice")
								}
								got, hasIDs := idsOf(t, c, "token_ids")
								role := chat && i == 0
								if flag && !role && !hasIDs {
									t.Fatalf("chunk %d without token_ids: %s", i, body)
								}
								if role && hasIDs {
									t.Fatalf("the role chunk carries token_ids")
								}
								ids = append(ids, got...)
								if chat {
									var d struct{ Content string }
									_ = json.Unmarshal(c["delta"], &d)
									text.WriteString(d.Content)
								} else {
									text.WriteString(str(t, c["text"]))
								}
								finish.WriteString(str(t, c["finish_reason"]))
							}
						}
						if text.String() != tc.text || finish.String() != tc.finish {
							t.Fatalf("text %q finish %q, want %q %q: %s", text.String(), finish.String(), tc.text, tc.finish, body)
						}
						if flag && !slices.Equal(ids, tc.ids) {
							t.Fatalf("token_ids %v, want %v: %s", ids, tc.ids, body)
						}
					})
				}
			}
		}
	}
}

// TestReturnTokenIDsSSEBytes pins both endpoints' streams byte for byte.
func TestReturnTokenIDsSSEBytes(t *testing.T) {
	eng := &deltaScript{deltas: []engine.Delta{dl("h", engine.FinishNone), dl("iE", engine.FinishNone), dl("N", engine.FinishStop, tokEnd)}}
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": eng})
	created := regexp.MustCompile(`"created":\d+`)

	resp := post(t, f.url+"/v1/completions", `{"model":"m","prompt":[104,105],"stream":true,"stop":"END","return_token_ids":true}`, "X-Request-Id", "r1")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	head := `data: {"id":"cmpl-r1","object":"text_completion","created":0,"model":"m",`
	want := head + `"choices":[{"index":0,"text":"h","logprobs":null,"finish_reason":null,"prompt_token_ids":[104,105],"token_ids":[104]}]}` + "\n\n" +
		head + `"choices":[{"index":0,"text":"i","logprobs":null,"finish_reason":null,"token_ids":[105,69]}]}` + "\n\n" +
		head + `"choices":[{"index":0,"text":"EN","logprobs":null,"finish_reason":null,"token_ids":[78,257]}]}` + "\n\n" +
		head + `"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop","token_ids":[]}]}` + "\n\n" +
		"data: [DONE]\n\n"
	if got := created.ReplaceAllString(string(body), `"created":0`); got != want {
		t.Fatalf("completions\n got: %s\nwant: %s", got, want)
	}

	resp = post(t, f.url+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stop":["E"],"return_token_ids":true}`, "X-Request-Id", "r2")
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	prompt := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(eng.prompt())), ","), "[]")
	head = `data: {"id":"chatcmpl-r2","object":"chat.completion.chunk","created":0,"model":"m",`
	want = head + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":[` + prompt + `]}` + "\n\n" +
		head + `"choices":[{"index":0,"delta":{"content":"h"},"logprobs":null,"finish_reason":null,"token_ids":[104]}]}` + "\n\n" +
		head + `"choices":[{"index":0,"delta":{"content":"i"},"logprobs":null,"finish_reason":null,"token_ids":[105,69]}]}` + "\n\n" +
		head + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop","token_ids":[]}]}` + "\n\n" +
		"data: [DONE]\n\n"
	if got := created.ReplaceAllString(string(body), `"created":0`); got != want {
		t.Fatalf("chat\n got: %s\nwant: %s", got, want)
	}

	// Text held back by a partial stop string: its ids still go out with
	// the delta that produced them (as vLLM streams them), and the token
	// that completes the stop string rides on the finish chunk.
	eng = &deltaScript{deltas: []engine.Delta{dl("a", engine.FinishNone), dl("E", engine.FinishNone), dl("N", engine.FinishNone), dl("D", engine.FinishNone), dl("z", engine.FinishLength)}}
	f = newFixture(t, 4096, map[string]engine.Generator{"w0": eng})
	resp = post(t, f.url+"/v1/completions", `{"model":"m","prompt":[104],"stream":true,"stop":"END","return_token_ids":true}`, "X-Request-Id", "r3")
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	head = `data: {"id":"cmpl-r3","object":"text_completion","created":0,"model":"m",`
	want = head + `"choices":[{"index":0,"text":"a","logprobs":null,"finish_reason":null,"prompt_token_ids":[104],"token_ids":[97]}]}` + "\n\n" +
		head + `"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":null,"token_ids":[69]}]}` + "\n\n" +
		head + `"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":null,"token_ids":[78]}]}` + "\n\n" +
		head + `"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop","token_ids":[68]}]}` + "\n\n" +
		"data: [DONE]\n\n"
	if got := created.ReplaceAllString(string(body), `"created":0`); got != want {
		t.Fatalf("held text\n got: %s\nwant: %s", got, want)
	}
}

// TestReturnTokenIDsFalseIsUnchanged: "return_token_ids":false answers the
// same bytes as no field at all, on every endpoint and mode.
func TestReturnTokenIDsFalseIsUnchanged(t *testing.T) {
	created := regexp.MustCompile(`"created":\d+`)
	for _, body := range []string{
		`{"model":"m","prompt":"go","max_tokens":6,"stop":"o t"%s}`,
		`{"model":"m","prompt":"go","max_tokens":6,"stream":true,"stream_options":{"include_usage":true}%s}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":6%s}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":6,"stream":true,"stop":["wo"]%s}`,
	} {
		eng := &enginetest.Scripted{Name: "m", Output: toks("one two")}
		f := newFixture(t, 4096, map[string]engine.Generator{"w0": eng})
		path := "/v1/completions"
		if strings.Contains(body, "messages") {
			path = "/v1/chat/completions"
		}
		var got []string
		for _, extra := range []string{"", `,"return_token_ids":false`, `,"return_token_ids":null`} {
			resp := post(t, f.url+path, fmt.Sprintf(body, extra), "X-Request-Id", "same")
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got = append(got, created.ReplaceAllString(string(b), `"created":0`))
		}
		if got[0] != got[1] || got[0] != got[2] || strings.Contains(got[0], "token_ids") {
			t.Fatalf("%s:\n%s\n%s\n%s", body, got[0], got[1], got[2])
		}
	}
}

func TestReturnTokenIDsInvalidType(t *testing.T) {
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": &enginetest.Scripted{Name: "m", Output: toks("x")}})
	for _, tc := range []struct{ path, body string }{
		{"/v1/completions", `{"model":"m","prompt":"x","return_token_ids":"true"}`},
		{"/v1/completions", `{"model":"m","prompt":[1,2],"stream":true,"return_token_ids":1}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"return_token_ids":[true]}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"return_token_ids":{"on":true}}`},
	} {
		resp := post(t, f.url+tc.path, tc.body)
		var e struct {
			Error struct {
				Message, Type string
				Param, Code   *string
			}
		}
		err := json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 400 || e.Error.Type != "invalid_request_error" || e.Error.Message == "" ||
			e.Error.Param == nil || *e.Error.Param != "return_token_ids" || e.Error.Code == nil || *e.Error.Code != "invalid_type" {
			t.Fatalf("%s: status %d %+v (%v)", tc.body, resp.StatusCode, e, err)
		}
	}
}

// TestReturnTokenIDsMidStreamError: ids already produced go out before the
// error event.
func TestReturnTokenIDsMidStreamError(t *testing.T) {
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": brokenWorker{}})
	resp := post(t, f.url+"/v1/completions", `{"model":"m","prompt":"x","stream":true,"return_token_ids":true}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	s := string(body)
	if !strings.Contains(s, `"text":"a","logprobs":null,"finish_reason":null,"prompt_token_ids":[120],"token_ids":[97]}`) ||
		!strings.Contains(s, `data: {"error":{"message":`) || !strings.HasSuffix(s, "data: [DONE]\n\n") {
		t.Fatalf("body %s", s)
	}
}

// extraIDs decodes an extra field the SDK kept raw.
func extraIDs(t *testing.T, fields map[string]interface{ Raw() string }, key string) []engine.Token {
	t.Helper()
	f, ok := fields[key]
	if !ok {
		t.Fatalf("the SDK did not keep %s", key)
	}
	var ids []engine.Token
	if err := json.Unmarshal([]byte(f.Raw()), &ids); err != nil {
		t.Fatalf("%s = %s: %v", key, f.Raw(), err)
	}
	return ids
}

func raws[F interface{ Raw() string }](m map[string]F) map[string]interface{ Raw() string } {
	out := map[string]interface{ Raw() string }{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestReturnTokenIDsWithOfficialSDK: openai-go parses the responses and
// chunks carrying the extra fields (keeping them as extra JSON), and its
// chat stream accumulator still works.
func TestReturnTokenIDsWithOfficialSDK(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: append(toks("abc"), tokEnd), EOS: []engine.Token{tokEnd}}
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": eng})
	c := client(f.url)
	ctx := context.Background()
	on := option.WithJSONSet("return_token_ids", true)
	want := append(toks("abc"), tokEnd)
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}

	chat, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: msgs}, on)
	if err != nil {
		t.Fatal(err)
	}
	if chat.Choices[0].Message.Content != "abc" || chat.Choices[0].FinishReason != "stop" || chat.Usage.CompletionTokens != 4 {
		t.Fatalf("chat %+v", chat)
	}
	if got := extraIDs(t, raws(chat.Choices[0].JSON.ExtraFields), "token_ids"); !slices.Equal(got, want) {
		t.Fatalf("chat token_ids %v", got)
	}
	if got := extraIDs(t, raws(chat.JSON.ExtraFields), "prompt_token_ids"); !slices.Equal(got, eng.Requests()[0].Prompt) {
		t.Fatalf("chat prompt_token_ids %v", got)
	}

	st := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: msgs,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}, on)
	var acc openai.ChatCompletionAccumulator
	var ids []engine.Token
	var prompt []engine.Token
	for st.Next() {
		ch := st.Current()
		acc.AddChunk(ch)
		if _, ok := ch.JSON.ExtraFields["prompt_token_ids"]; ok {
			prompt = extraIDs(t, raws(ch.JSON.ExtraFields), "prompt_token_ids")
		}
		if len(ch.Choices) > 0 {
			if _, ok := ch.Choices[0].JSON.ExtraFields["token_ids"]; ok {
				ids = append(ids, extraIDs(t, raws(ch.Choices[0].JSON.ExtraFields), "token_ids")...)
			}
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != "abc" || acc.Choices[0].FinishReason != "stop" || acc.Usage.CompletionTokens != 4 {
		t.Fatalf("accumulated %+v", acc.ChatCompletion)
	}
	if !slices.Equal(ids, want) || !slices.Equal(prompt, eng.Requests()[1].Prompt) {
		t.Fatalf("streamed token_ids %v prompt_token_ids %v", ids, prompt)
	}

	tokPrompt := openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{104, 105}}
	cmpl, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: "m", Prompt: tokPrompt}, on)
	if err != nil {
		t.Fatal(err)
	}
	ex := raws(cmpl.Choices[0].JSON.ExtraFields)
	if cmpl.Choices[0].Text != "abc" || !slices.Equal(extraIDs(t, ex, "token_ids"), want) ||
		!slices.Equal(extraIDs(t, ex, "prompt_token_ids"), toks("hi")) {
		t.Fatalf("completion %s", cmpl.RawJSON())
	}

	cs := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: "m", Prompt: tokPrompt}, on)
	var text strings.Builder
	ids, prompt = nil, nil
	for cs.Next() {
		ch := cs.Current()
		if len(ch.Choices) == 0 {
			continue
		}
		text.WriteString(ch.Choices[0].Text)
		ex := raws(ch.Choices[0].JSON.ExtraFields)
		ids = append(ids, extraIDs(t, ex, "token_ids")...)
		if _, ok := ex["prompt_token_ids"]; ok {
			prompt = append(prompt, extraIDs(t, ex, "prompt_token_ids")...)
		}
	}
	if err := cs.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != "abc" || !slices.Equal(ids, want) || !slices.Equal(prompt, toks("hi")) {
		t.Fatalf("streamed completion %q token_ids %v prompt_token_ids %v", text.String(), ids, prompt)
	}
}

// TestTokenIDsFollowText drives output.next over random scripts (random
// tokens, delta boundaries and stop strings): with return_token_ids the text
// is the same as without, the ids are a prefix of what the engine produced,
// and when a stop string ends the choice early the ids stop exactly at the
// token that completed it.
func TestTokenIDsFollowText(t *testing.T) {
	alphabet := append(toks("abEENND é"), 0xc3, tokEnd) // 0xc3 alone: a rune that never completes
	stopSets := [][]string{nil, {"END"}, {"b"}, {"é a", "Na"}, {"EN", "ND"}, {"\uFFFD"}}
	rng := rand.New(rand.NewPCG(1, 2))
	// visible is the text of ids as streamed so far: an incomplete rune at
	// the end is still held.
	visible := func(ids []engine.Token) string {
		return tokenizer.NewDetokenizer(byteTok{}, tokenizer.SkipSpecial()).Add(ids...)
	}
	run := func(deltas []engine.Delta, stops []string, want bool) (string, []engine.Token) {
		m := &Model{metrics: newMetrics(nil).forModel("m")}
		o := &output{j: &job{prompt: toks("p")}, m: m, stream: &replay{ds: deltas}, cancel: func() {},
			detok: tokenizer.NewDetokenizer(byteTok{}, tokenizer.SkipSpecial()), stop: stopMatcher{stops: stops}, wantIDs: want}
		var text strings.Builder
		for {
			s, done, err := o.next()
			if err != nil {
				t.Fatal(err)
			}
			text.WriteString(s)
			if done {
				return text.String(), o.ids
			}
		}
	}
	for i := range 5000 {
		var all []engine.Token
		var deltas []engine.Delta
		for n := rng.IntN(5) + 1; len(deltas) < n; {
			d := engine.Delta{}
			for k := rng.IntN(4); k >= 0; k-- {
				d.Tokens = append(d.Tokens, alphabet[rng.IntN(len(alphabet))])
			}
			all = append(all, d.Tokens...)
			deltas = append(deltas, d)
		}
		deltas[len(deltas)-1].Finish = engine.FinishLength
		stops := stopSets[rng.IntN(len(stopSets))]
		plain, _ := run(slices.Clone(deltas), stops, false)
		text, ids := run(slices.Clone(deltas), stops, true)
		if text != plain {
			t.Fatalf("#%d %v stops %q: text %q with ids, %q without", i, all, stops, text, plain)
		}
		if len(ids) == 0 || !slices.Equal(ids, all[:len(ids)]) {
			t.Fatalf("#%d %v stops %q: ids %v are not a prefix", i, all, stops, ids)
		}
		if len(ids) < len(all) {
			// Ended early: the ids' text is the text, then a stop string
			// (then at most the rest of the last token's text), and one id
			// fewer would not complete it.
			ok := false
			for _, st := range stops {
				if strings.HasPrefix(visible(ids), text+st) && !strings.HasPrefix(visible(ids[:len(ids)-1]), text+st) {
					ok = true
				}
			}
			if !ok {
				t.Fatalf("#%d %v stops %q: text %q, ids %v (%q) do not end at the stop string", i, all, stops, text, ids, visible(ids))
			}
		}
	}
}

// TestContinuousUsageStats: vLLM's stream_options.continuous_usage_stats
// puts usage (with the cached tokens) in every content chunk, so a router
// in front sees them with the first token; without it nothing changes.
func TestContinuousUsageStats(t *testing.T) {
	// Engines report the counts on every delta from the first on.
	first, second := dl("ab", engine.FinishNone), dl("c", engine.FinishLength)
	first.CachedTokens, second.CachedTokens = 1, 1
	eng := &deltaScript{deltas: []engine.Delta{first, second}}
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": eng})
	created := regexp.MustCompile(`"created":\d+`)
	resp := post(t, f.url+"/v1/completions", `{"model":"m","prompt":[104,105],"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`, "X-Request-Id", "r1")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	head := `data: {"id":"cmpl-r1","object":"text_completion","created":0,"model":"m",`
	usage := func(completion int) string {
		return fmt.Sprintf(`"usage":{"prompt_tokens":2,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":1}}`, completion, 2+completion)
	}
	want := head + `"choices":[{"index":0,"text":"ab","logprobs":null,"finish_reason":null}],` + usage(2) + "}\n\n" +
		head + `"choices":[{"index":0,"text":"c","logprobs":null,"finish_reason":null}],` + usage(3) + "}\n\n" +
		head + `"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length"}],` + usage(3) + "}\n\n" +
		head + `"choices":[],` + usage(3) + "}\n\n" +
		"data: [DONE]\n\n"
	if got := created.ReplaceAllString(string(body), `"created":0`); got != want {
		t.Fatalf("\n got: %s\nwant: %s", got, want)
	}
}
