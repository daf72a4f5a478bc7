package anthropic

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/openai/chatstream"
)

func parse(t *testing.T, s string) *chatstream.Chunk {
	t.Helper()
	c, err := chatstream.ParseData([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type ev struct {
	name string
	data map[string]any
}

func events(t *testing.T, b []byte) []ev {
	t.Helper()
	var out []ev
	sc := bufio.NewScanner(bytes.NewReader(b))
	var name string
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			name = n
		} else if d, ok := strings.CutPrefix(line, "data: "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(d), &m); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if m["type"] != name {
				t.Fatalf("event %q has type %v", name, m["type"])
			}
			out = append(out, ev{name, m})
		}
	}
	return out
}

func TestTranslateStream(t *testing.T) {
	cases := []struct {
		name       string
		chunks     []string
		want       string
		stopReason string
		content    string
	}{
		{
			name: "text",
			chunks: []string{
				`{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":4}}}`,
				`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":4}}}`,
			},
			want:       "message_start ping content_block_start content_block_delta content_block_stop message_delta message_stop",
			stopReason: "end_turn", content: "text",
		},
		{
			name: "thinking, text, tool use",
			chunks: []string{
				`{"choices":[{"index":0,"delta":{"reasoning_content":"hmm"},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{"content":"Let me check."},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":"}}]},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]},"finish_reason":"tool_calls"}]}`,
			},
			want: "message_start ping content_block_start content_block_delta content_block_stop content_block_start content_block_delta content_block_stop " +
				"content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop",
			stopReason: "tool_use", content: "thinking text tool_use",
		},
		{
			name:       "length",
			chunks:     []string{`{"choices":[{"index":0,"delta":{"content":"ab"},"finish_reason":"length"}]}`},
			want:       "message_start ping content_block_start content_block_delta content_block_stop message_delta message_stop",
			stopReason: "max_tokens", content: "text",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTranslator("msg_x", "m", nil)
			var buf []byte
			for _, c := range tc.chunks {
				buf = tr.Chunk(buf, parse(t, c))
			}
			buf = tr.End(buf)
			evs := events(t, buf)
			var names []string
			for _, e := range evs {
				names = append(names, e.name)
			}
			if got := strings.Join(names, " "); got != tc.want {
				t.Fatalf("events\n got %s\nwant %s", got, tc.want)
			}
			md := evs[len(evs)-2].data["delta"].(map[string]any)
			if md["stop_reason"] != tc.stopReason {
				t.Fatalf("stop_reason %v, want %s", md["stop_reason"], tc.stopReason)
			}
			var types []string
			for _, b := range tr.Msg.Content {
				types = append(types, b.Type)
			}
			if strings.Join(types, " ") != tc.content {
				t.Fatalf("content %v, want %s", types, tc.content)
			}
		})
	}
}

func TestResultUsageAndToolInput(t *testing.T) {
	tr := NewTranslator("msg_x", "m", nil)
	for _, c := range []string{
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"g","arguments":"not json"}}]},"finish_reason":"tool_calls"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":7,"total_tokens":17,"prompt_tokens_details":{"cached_tokens":6}}}`,
	} {
		tr.Chunk(nil, parse(t, c))
	}
	m := tr.Result()
	b, _ := json.Marshal(m)
	for _, want := range []string{
		`"content":[{"type":"tool_use","id":"call_1","name":"f","input":{"a":1}},{"type":"tool_use","id":"call_2","name":"g","input":{"arguments":"not json"}}]`,
		`"stop_reason":"tool_use","stop_sequence":null`,
		`"usage":{"input_tokens":4,"output_tokens":7,"cache_creation_input_tokens":0,"cache_read_input_tokens":6}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("message lacks %s\n%s", want, b)
		}
	}
}

func TestToChat(t *testing.T) {
	body := `{"model":"m","max_tokens":100,"system":[{"type":"text","text":"sys"}],"messages":[
		{"role":"user","content":"weather in Paris?"},
		{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":""},{"type":"text","text":"checking"},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"sunny"}]},{"type":"text","text":"and tomorrow?"}]}],
		"tools":[{"name":"get_weather","description":"d","input_schema":{"type":"object"}}],
		"tool_choice":{"type":"any","disable_parallel_tool_use":true},"thinking":{"type":"enabled","budget_tokens":50},
		"stop_sequences":["END"],"top_k":5}`
	r, e := Decode([]byte(body))
	if e != nil {
		t.Fatal(e)
	}
	c, e := ToChat(r)
	if e != nil {
		t.Fatal(e)
	}
	got, _ := json.Marshal(c)
	for _, want := range []string{
		`"messages":[{"role":"system","content":"sys"},{"role":"user","content":"weather in Paris?"}`,
		`{"role":"assistant","content":"checking","reasoning_content":"t","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}`,
		`{"role":"tool","content":"sunny","tool_call_id":"toolu_1"},{"role":"user","content":"and tomorrow?"}]`,
		`"tools":[{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object"}}}]`,
		`"tool_choice":"required","parallel_tool_calls":false`,
		`"chat_template_kwargs":{"enable_thinking":true}`, `"max_completion_tokens":100`, `"top_k":5`,
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("chat request lacks %s\n%s", want, got)
		}
	}
}

func TestRefusals(t *testing.T) {
	cases := []struct{ body, field string }{
		{`{"model":"m","messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, "model"},
		{`{"model":"m","max_tokens":5,"messages":[]}`, "messages"},
		{`{"model":"m","max_tokens":5,"temperature":1.5,"messages":[{"role":"user","content":"x"}]}`, "temperature"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"x"}}]}]}`, "messages[0].content[0].type"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]}`, "messages[0].role"},
		{`{"model":"m","max_tokens":5,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"x"}]}`, "tools[0].type"},
		{`{"model":"m","max_tokens":5,"thinking":{"type":"enabled","budget_tokens":10},"messages":[{"role":"user","content":"x"}]}`, "thinking.budget_tokens"},
	}
	for _, tc := range cases {
		r, e := Decode([]byte(tc.body))
		if e == nil {
			_, e = ToChat(r)
		}
		if e == nil || e.Status != 400 || e.Type != "invalid_request_error" || !strings.HasPrefix(e.Message, tc.field+": ") {
			t.Errorf("%s: got %v, want a 400 naming %s", tc.body, e, tc.field)
		}
		if e != nil {
			var body struct {
				Type  string `json:"type"`
				Error struct{ Type, Message string }
			}
			if err := json.Unmarshal(e.JSON(), &body); err != nil || body.Type != "error" || body.Error.Type != e.Type {
				t.Errorf("error body %s", e.JSON())
			}
		}
	}
}

func TestStopSequences(t *testing.T) {
	cases := []struct {
		deltas     []string
		text, stop string
	}{
		{[]string{"Hello EN", "D world"}, "Hello ", "END"},
		{[]string{"abc", "def"}, "abcdef", ""},
		{[]string{"E", "N", "X"}, "ENX", ""},
		{[]string{"xSTOP"}, "x", "STOP"},
	}
	for _, tc := range cases {
		tr := NewTranslator("msg_x", "m", []string{"END", "STOP"})
		var buf []byte
		for _, d := range tc.deltas {
			b, _ := json.Marshal(d)
			buf = tr.Chunk(buf, parse(t, `{"choices":[{"index":0,"delta":{"content":`+string(b)+`},"finish_reason":null}]}`))
			if tr.Stopped {
				break
			}
		}
		buf = tr.End(buf)
		m := tr.Msg
		if got := *m.Content[0].Text; got != tc.text {
			t.Errorf("%q: text %q, want %q", tc.deltas, got, tc.text)
		}
		var streamed strings.Builder
		for _, e := range events(t, buf) {
			if d, ok := e.data["delta"].(map[string]any); ok && d["type"] == "text_delta" {
				streamed.WriteString(d["text"].(string))
			}
		}
		if streamed.String() != tc.text {
			t.Errorf("%q: streamed %q, want %q", tc.deltas, streamed.String(), tc.text)
		}
		wantReason := "end_turn"
		if tc.stop != "" {
			wantReason = "stop_sequence"
			if m.StopSequence == nil || *m.StopSequence != tc.stop {
				t.Errorf("%q: stop_sequence %v, want %s", tc.deltas, m.StopSequence, tc.stop)
			}
		}
		if *m.StopReason != wantReason {
			t.Errorf("%q: stop_reason %s, want %s", tc.deltas, *m.StopReason, wantReason)
		}
	}
}

// FuzzDecode: any body decodes to a request or a 400, and a request
// converts to a chat request or a 400; neither panics.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x","is_error":true}]}],"tool_choice":{"type":"tool","name":"f"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, e := Decode(body)
		if e != nil {
			if e.Status != 400 {
				t.Fatalf("status %d", e.Status)
			}
			return
		}
		if _, e := ToChat(r); e != nil && e.Status != 400 {
			t.Fatalf("status %d", e.Status)
		}
	})
}

// FuzzStopMatcher: text pushed in any split comes out as the text up to
// the first stop sequence, as one push of the whole would give.
func FuzzStopMatcher(f *testing.F) {
	f.Add("hello END world", uint8(3))
	f.Fuzz(func(t *testing.T, s string, cut uint8) {
		stops := []string{"END", "ab", "x"}
		whole := stopMatcher{stops: stops}
		want, wantStop := whole.push(s)
		if wantStop == "" {
			want += whole.flush()
		}
		i := int(cut) % (len(s) + 1)
		split := stopMatcher{stops: stops}
		a, st := split.push(s[:i])
		got := a
		if st == "" {
			b, st2 := split.push(s[i:])
			got += b
			st = st2
			if st == "" {
				got += split.flush()
			}
		}
		if got != want || st != wantStop {
			t.Fatalf("split at %d: %q %q, whole: %q %q", i, got, st, want, wantStop)
		}
	})
}
