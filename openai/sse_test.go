package openai

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestSSEFramingBytes(t *testing.T) {
	h := ChunkHeader{ID: "chatcmpl-1", Model: "tandem-mock", Created: 1700000000, Chat: true}
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"role", h.AppendRoleChunk(nil),
			`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"tandem-mock","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n"},
		{"content", h.AppendChunk(nil, "Hi \"x\"\n", ""),
			`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"tandem-mock","choices":[{"index":0,"delta":{"content":"Hi \"x\"\n"},"logprobs":null,"finish_reason":null}]}` + "\n\n"},
		{"finish", h.AppendChunk(nil, "", "stop"),
			`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"tandem-mock","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}` + "\n\n"},
		{"usage", h.AppendUsageChunk(nil, NewUsage(10, 3, 8)),
			`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"tandem-mock","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":8}}}` + "\n\n"},
		{"completion", (&ChunkHeader{ID: "cmpl-1", Model: "m", Created: 1}).AppendChunk(nil, "ab", "length"),
			`data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"ab","logprobs":null,"finish_reason":"length"}]}` + "\n\n"},
		{"error", AppendErrorEvent(nil, Unavailable("worker_lost", 0, "gone")),
			`data: {"error":{"message":"gone","type":"service_unavailable","param":null,"code":"worker_lost"}}` + "\n\n"},
	}
	for _, tc := range tests {
		if string(tc.got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, tc.got, tc.want)
		}
		if tc.name != "error" {
			var v map[string]any
			body := tc.got[len("data: ") : len(tc.got)-2]
			if err := json.Unmarshal(body, &v); err != nil {
				t.Errorf("%s: not JSON: %v", tc.name, err)
			}
		}
	}
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s", "\x00\x01\x1f\x7f", "é中😀", "bad\xffutf8\xc3", "\u2028\u2029", "<&>"} {
		got := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q: %s not JSON: %v", s, got, err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("%q round-tripped to %q", s, back)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("hello")
	f.Add("\xff\xfe\"\\\n")
	f.Fuzz(func(t *testing.T, s string) {
		var back string
		if err := json.Unmarshal(AppendString(nil, s), &back); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("%q -> %q", s, back)
		}
	})
}
