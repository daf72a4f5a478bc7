package openai

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
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

// TestSSETokenIDsBytes pins the return_token_ids chunk shapes (vLLM's
// protocol): prompt_token_ids in the choice for completions and at the top
// level for chat, token_ids in the choice.
func TestSSETokenIDsBytes(t *testing.T) {
	chat := ChunkHeader{ID: "chatcmpl-1", Model: "m", Created: 1, Chat: true}
	cmpl := ChunkHeader{ID: "cmpl-1", Model: "m", Created: 1}
	const chatHead = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",`
	const cmplHead = `data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m",`
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"chat role", chat.AppendRoleChunkIDs(nil, []int32{1, 2, 3}),
			chatHead + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":[1,2,3]}` + "\n\n"},
		{"chat content", chat.AppendChunkIDs(nil, "hi", "", nil, []int32{104, 105}),
			chatHead + `"choices":[{"index":0,"delta":{"content":"hi"},"logprobs":null,"finish_reason":null,"token_ids":[104,105]}]}` + "\n\n"},
		{"chat held text", chat.AppendChunkIDs(nil, "", "", nil, []int32{69}),
			chatHead + `"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":null,"token_ids":[69]}]}` + "\n\n"},
		{"chat finish", chat.AppendChunkIDs(nil, "", "stop", nil, nil),
			chatHead + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop","token_ids":[]}]}` + "\n\n"},
		{"chat prompt on a content chunk", chat.AppendChunkIDs(nil, "a", "", []int32{9}, []int32{97}),
			chatHead + `"choices":[{"index":0,"delta":{"content":"a"},"logprobs":null,"finish_reason":null,"token_ids":[97]}],"prompt_token_ids":[9]}` + "\n\n"},
		{"completion first", cmpl.AppendChunkIDs(nil, "ab", "", []int32{5, 6}, []int32{97, 98}),
			cmplHead + `"choices":[{"index":0,"text":"ab","logprobs":null,"finish_reason":null,"prompt_token_ids":[5,6],"token_ids":[97,98]}]}` + "\n\n"},
		{"completion later", cmpl.AppendChunkIDs(nil, "c", "", nil, []int32{99}),
			cmplHead + `"choices":[{"index":0,"text":"c","logprobs":null,"finish_reason":null,"token_ids":[99]}]}` + "\n\n"},
		{"completion finish", cmpl.AppendChunkIDs(nil, "", "length", nil, []int32{}),
			cmplHead + `"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length","token_ids":[]}]}` + "\n\n"},
		{"ids", AppendTokenIDs(nil, []int32{0, 2147483647, 7}), `[0,2147483647,7]`},
		{"no ids", AppendTokenIDs(nil, nil), `[]`},
	}
	for _, tc := range tests {
		if string(tc.got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, tc.got, tc.want)
		}
		if body, ok := strings.CutPrefix(string(tc.got), "data: "); ok && !json.Valid([]byte(body)) {
			t.Errorf("%s: not JSON", tc.name)
		}
	}
	// Without ids the bytes are AppendChunk's, shape for shape.
	for _, h := range []ChunkHeader{chat, cmpl} {
		for _, finish := range []string{"", "stop"} {
			plain := string(h.AppendChunk(nil, "x", finish))
			with := string(h.AppendChunkIDs(nil, "x", finish, nil, nil))
			if strings.Replace(with, `,"token_ids":[]`, "", 1) != plain {
				t.Errorf("chat=%v finish=%q: %s vs %s", h.Chat, finish, with, plain)
			}
		}
	}
}

// TestChunkEncodersDoNotAllocate: into a buffer with room, neither the
// plain encoders (the hot path) nor the token-id ones allocate.
func TestChunkEncodersDoNotAllocate(t *testing.T) {
	h := ChunkHeader{ID: "chatcmpl-1", Model: "m", Created: 1, Chat: true}
	buf := make([]byte, 0, 4096)
	ids := []int32{1, 2, 3}
	for name, f := range map[string]func(){
		"AppendChunk":        func() { buf = h.AppendChunk(buf[:0], "token", "") },
		"AppendRoleChunk":    func() { buf = h.AppendRoleChunk(buf[:0]) },
		"AppendChunkIDs":     func() { buf = h.AppendChunkIDs(buf[:0], "token", "", ids, ids) },
		"AppendRoleChunkIDs": func() { buf = h.AppendRoleChunkIDs(buf[:0], ids) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations", name, n)
		}
	}
}

func FuzzAppendChunkIDs(f *testing.F) {
	f.Add("hi", "", true, []byte{1, 2, 3})
	f.Add("\xff\"", "stop", false, []byte{})
	f.Fuzz(func(t *testing.T, text, finish string, chat bool, raw []byte) {
		ids := make([]int32, len(raw))
		for i, b := range raw {
			ids[i] = int32(b) << (b % 24)
		}
		h := ChunkHeader{ID: "x", Model: "m", Created: 1, Chat: chat}
		got := h.AppendChunkIDs(nil, text, finish, ids, ids)
		var ch struct {
			PromptTokenIDs []int32 `json:"prompt_token_ids"`
			Choices        []struct {
				PromptTokenIDs []int32 `json:"prompt_token_ids"`
				TokenIDs       []int32 `json:"token_ids"`
			} `json:"choices"`
		}
		body, ok := bytes.CutPrefix(got, []byte("data: "))
		if !ok || !bytes.HasSuffix(body, []byte("\n\n")) {
			t.Fatalf("framing: %q", got)
		}
		if err := json.Unmarshal(body, &ch); err != nil {
			t.Fatalf("%q: %v", got, err)
		}
		prompt := ch.Choices[0].PromptTokenIDs
		if chat {
			prompt = ch.PromptTokenIDs
		}
		if !slices.Equal(ch.Choices[0].TokenIDs, ids) || !slices.Equal(prompt, ids) {
			t.Fatalf("%q: ids %v %v, want %v", got, ch.Choices[0].TokenIDs, prompt, ids)
		}
	})
}
