package responses

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/openai/chatstream"
)

func chunk(t *testing.T, s string) *chatstream.Chunk {
	t.Helper()
	c, err := chatstream.ParseData([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type event struct {
	name string
	data map[string]any
}

// events parses an SSE byte stream, checking that every event's "type"
// matches its event name and that sequence numbers count up from 0.
func events(t *testing.T, b []byte) []event {
	t.Helper()
	var out []event
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatalf("event %s: %v: %s", name, err, line)
			}
			if d["type"] != name {
				t.Fatalf("event %q has type %v", name, d["type"])
			}
			if int(d["sequence_number"].(float64)) != len(out) {
				t.Fatalf("event %d (%s) has sequence_number %v", len(out), name, d["sequence_number"])
			}
			out = append(out, event{name, d})
		}
	}
	return out
}

func names(evs []event) string {
	var n []string
	for _, e := range evs {
		n = append(n, strings.TrimPrefix(e.name, "response."))
	}
	return strings.Join(n, " ")
}

func TestTranslateStream(t *testing.T) {
	cases := []struct {
		name   string
		chunks []string
		want   string // event names without "response."
		status string
		output string // the output items' types
	}{
		{
			name: "text",
			chunks: []string{
				`{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
				`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9,"prompt_tokens_details":{"cached_tokens":4}}}`,
			},
			want:   "created in_progress output_item.added content_part.added output_text.delta output_text.delta output_text.done content_part.done output_item.done completed",
			status: "completed", output: "message",
		},
		{
			name: "reasoning then text then two calls",
			chunks: []string{
				`{"choices":[{"index":0,"delta":{"reasoning_content":"think"},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":"}}]},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"g","arguments":"{}"}}]},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
				`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":9,"total_tokens":16,"completion_tokens_details":{"reasoning_tokens":1}}}`,
			},
			want: "created in_progress output_item.added content_part.added reasoning_text.delta reasoning_text.done content_part.done output_item.done " +
				"output_item.added content_part.added output_text.delta output_text.done content_part.done output_item.done " +
				"output_item.added function_call_arguments.delta function_call_arguments.delta function_call_arguments.done output_item.done " +
				"output_item.added function_call_arguments.delta function_call_arguments.done output_item.done completed",
			status: "completed", output: "reasoning message function_call function_call",
		},
		{
			name: "length is incomplete",
			chunks: []string{
				`{"choices":[{"index":0,"delta":{"content":"abc"},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`,
			},
			want:   "created in_progress output_item.added content_part.added output_text.delta output_text.done content_part.done output_item.done incomplete",
			status: "incomplete", output: "message",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := &Request{Model: "m"}
			tr := NewTranslator(NewResponse("resp_x", 1, req))
			buf := tr.Start(nil)
			for _, c := range tc.chunks {
				buf = tr.Chunk(buf, chunk(t, c))
			}
			buf = tr.End(buf)
			evs := events(t, buf)
			if got := names(evs); got != tc.want {
				t.Fatalf("events\n got %s\nwant %s", got, tc.want)
			}
			last := evs[len(evs)-1].data["response"].(map[string]any)
			if last["status"] != tc.status {
				t.Fatalf("status %v, want %s", last["status"], tc.status)
			}
			var types []string
			for _, it := range last["output"].([]any) {
				types = append(types, it.(map[string]any)["type"].(string))
			}
			if strings.Join(types, " ") != tc.output {
				t.Fatalf("output %v, want %s", types, tc.output)
			}
		})
	}
}

func TestTranslateCallsAndUsage(t *testing.T) {
	tr := NewTranslator(NewResponse("resp_x", 1, &Request{Model: "m"}))
	for _, c := range []string{
		`{"choices":[{"index":0,"delta":{"reasoning_content":"r"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":"}}]},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]},"finish_reason":"tool_calls"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":3},"completion_tokens_details":{"reasoning_tokens":1}}}`,
	} {
		tr.Chunk(nil, chunk(t, c))
	}
	tr.End(nil)
	r := tr.Resp
	if len(r.Output) != 2 || r.Output[1].Type != "function_call" {
		t.Fatalf("output %+v", r.Output)
	}
	fc := r.Output[1]
	if fc.CallID != "call_a" || fc.Name != "get_weather" || fc.Arguments != `{"city":"Paris"}` || fc.Status != "completed" {
		t.Fatalf("function call %+v", fc)
	}
	u := r.Usage
	if u.InputTokens != 10 || u.OutputTokens != 5 || u.TotalTokens != 15 || u.InputTokensDetails.CachedTokens != 3 || u.OutputTokensDetails.ReasoningTokens != 1 {
		t.Fatalf("usage %+v", u)
	}
	conv := tr.Conversation(nil)
	if len(conv) != 1 || conv[0].Role != "assistant" || conv[0].ReasoningContent != "r" || len(conv[0].ToolCalls) != 1 || string(conv[0].Content) != "null" {
		t.Fatalf("conversation %+v", conv)
	}
}

func TestToChat(t *testing.T) {
	body := `{"model":"m","instructions":"be brief","input":[
		{"role":"user","content":[{"type":"input_text","text":"weather?"}]},
		{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
		{"type":"function_call_output","call_id":"call_1","output":"sunny"},
		{"type":"message","role":"assistant","content":[{"type":"output_text","text":"It is sunny."}]},
		{"role":"user","content":"thanks"}],
		"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}],
		"tool_choice":{"type":"function","name":"get_weather"},
		"text":{"format":{"type":"json_schema","name":"w","schema":{"type":"object"},"strict":true}},
		"reasoning":{"effort":"low"},"max_output_tokens":50}`
	r, e := Decode([]byte(body))
	if e != nil {
		t.Fatal(e)
	}
	c, conv, e := ToChat(r, []chatstream.Message{{Role: "user", Content: chatstream.Text("earlier")}})
	if e != nil {
		t.Fatal(e)
	}
	got, _ := json.Marshal(c)
	for _, want := range []string{
		`{"role":"system","content":"be brief"},{"role":"user","content":"earlier"},{"role":"user","content":"weather?"}`,
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}`,
		`{"role":"tool","content":"sunny","tool_call_id":"call_1"}`,
		`{"role":"assistant","content":"It is sunny."},{"role":"user","content":"thanks"}`,
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`,
		`"tool_choice":{"function":{"name":"get_weather"},"type":"function"}`,
		`"response_format":{"json_schema":{"name":"w","schema":{"type":"object"},"strict":true},"type":"json_schema"}`,
		`"reasoning_effort":"low"`, `"max_completion_tokens":50`, `"stream":true`, `"include_usage":true`,
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("chat request lacks %s\n%s", want, got)
		}
	}
	if len(conv) != 6 || conv[0].Role != "user" {
		t.Fatalf("conversation (no instructions) has %d messages: %+v", len(conv), conv)
	}
}

func TestDecodeRefusals(t *testing.T) {
	cases := []struct{ body, param string }{
		{`{"input":"x"}`, "model"},
		{`{"model":"m"}`, "input"},
		{`{"model":"m","input":"x","background":true}`, "background"},
		{`{"model":"m","input":"x","truncation":"auto"}`, "truncation"},
		{`{"model":"m","input":"x","max_output_tokens":0}`, "max_output_tokens"},
		{`{"model":"m","input":"x","include":["file_search_call.results"]}`, "include"},
		{`{"model":"m","input":"x","conversation":"conv_1"}`, "conversation"},
		{`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, "input[0].content[0].type"},
		{`{"model":"m","input":[{"type":"item_reference","id":"x"}]}`, "input[0].type"},
		{`{"model":"m","input":"x","tools":[{"type":"web_search"}]}`, "tools[0].type"},
		{`{"model":"m","input":"x","text":{"format":{"type":"yaml"}}}`, "text.format.type"},
		{`{"model":"m","input":"x","top_logprobs":21}`, "top_logprobs"},
	}
	for _, tc := range cases {
		r, e := Decode([]byte(tc.body))
		if e == nil {
			_, _, e = ToChat(r, nil)
		}
		if e == nil || e.Param != tc.param || e.Status != 400 {
			t.Errorf("%s: got %v, want a 400 naming %s", tc.body, e, tc.param)
		}
	}
}

func TestStoreBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewStore(StoreConfig{Size: 2, Bytes: 1 << 20, TTL: time.Minute})
	s.now = func() time.Time { return now }
	put := func(id string) {
		s.Put(&Response{ID: id}, []chatstream.Message{{Role: "user", Content: chatstream.Text(id)}})
	}
	put("a")
	put("b")
	if _, ok := s.Get("a"); !ok { // a is now the most recently used
		t.Fatal("a missing")
	}
	put("c")
	if _, ok := s.Get("b"); ok {
		t.Fatal("b should have been evicted (least recently used)")
	}
	if n, _, ev := s.Stats(); n != 2 || ev != 1 {
		t.Fatalf("stats: %d stored, %d evicted; want 2, 1", n, ev)
	}
	if _, ok := s.Get("a"); !ok {
		t.Fatal("a evicted")
	}
	now = now.Add(2 * time.Minute)
	if _, ok := s.Get("c"); ok {
		t.Fatal("c outlived its TTL")
	}
	small := NewStore(StoreConfig{Size: 10, Bytes: 2000, TTL: time.Minute})
	if small.Put(&Response{ID: "big"}, []chatstream.Message{{Role: "user", Content: chatstream.Text(strings.Repeat("x", 4000))}}) {
		t.Fatal("a response past the byte bound was stored")
	}
	if NewStore(StoreConfig{}).Put(&Response{ID: "x"}, nil) {
		t.Fatal("a store of size 0 stored")
	}
}

// FuzzDecode: any body decodes to a request or a 400, and a request
// converts to a chat request or a 400; neither panics.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"model":"m","input":"hi"}`))
	f.Add([]byte(`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x"}],"tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"f"},"text":{"format":{"type":"json_schema","name":"n","schema":{}}}}`))
	f.Add([]byte(`{"model":"m","input":[{"type":"reasoning","content":[{"type":"reasoning_text","text":"t"}]},{"role":"assistant","content":[{"type":"output_text","text":"a"}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, e := Decode(body)
		if e != nil {
			if e.Status != 400 {
				t.Fatalf("status %d", e.Status)
			}
			return
		}
		if _, _, e := ToChat(r, nil); e != nil && e.Status != 400 {
			t.Fatalf("status %d", e.Status)
		}
	})
}

// FuzzTranslate: any chat chunk sequence translates without panicking,
// and every item ends completed.
func FuzzTranslate(f *testing.F) {
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"reasoning_content":"r","content":"c","tool_calls":[{"index":3,"id":"x","function":{"name":"f","arguments":"{"}}]},"finish_reason":"length"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr := NewTranslator(NewResponse("resp_x", 1, &Request{Model: "m"}))
		buf := tr.Start(nil)
		for _, line := range bytes.Split(data, []byte("\n")) {
			if c, err := chatstream.ParseData(line); err == nil {
				buf = tr.Chunk(buf, c)
			}
		}
		tr.End(buf)
		for _, it := range tr.Resp.Output {
			if it.Status != "completed" {
				t.Fatalf("item %+v not completed", it)
			}
		}
	})
}
