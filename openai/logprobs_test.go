package openai

import (
	"encoding/json"
	"math"
	"testing"
)

func TestDecodeLogprobs(t *testing.T) {
	for _, tc := range []struct {
		name      string
		chat      bool
		body      string
		want, top int // want: -1 none
	}{
		{"chat none", true, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, -1, 0},
		{"chat false", true, `{"model":"m","messages":[{"role":"user","content":"hi"}],"logprobs":false,"top_logprobs":0}`, -1, 0},
		{"chat true", true, `{"model":"m","messages":[{"role":"user","content":"hi"}],"logprobs":true}`, 1, 0},
		{"chat top 20", true, `{"model":"m","messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":20}`, 1, 20},
		{"completion none", false, `{"model":"m","prompt":"x"}`, -1, 0},
		{"completion 0", false, `{"model":"m","prompt":"x","logprobs":0}`, 1, 0},
		{"completion 5", false, `{"model":"m","prompt":"x","logprobs":5}`, 1, 5},
	} {
		var s *Sampling
		if tc.chat {
			r, e := DecodeChat([]byte(tc.body))
			if e != nil {
				t.Fatalf("%s: %v", tc.name, e)
			}
			s = &r.Sampling
		} else {
			r, e := DecodeCompletion([]byte(tc.body))
			if e != nil {
				t.Fatalf("%s: %v", tc.name, e)
			}
			s = &r.Sampling
		}
		if s.WantLogprobs != (tc.want == 1) || s.TopLogprobsN != tc.top {
			t.Errorf("%s: want %v top %d", tc.name, s.WantLogprobs, s.TopLogprobsN)
		}
	}
	for _, body := range []string{`{"model":"m","prompt":"x","logprobs":21}`, `{"model":"m","prompt":"x","logprobs":-1}`, `{"model":"m","prompt":"x","logprobs":true}`} {
		if _, e := DecodeCompletion([]byte(body)); e == nil || e.Param != "logprobs" {
			t.Errorf("%s: %v", body, e)
		}
	}
}

func TestAppendLogprobsShapes(t *testing.T) {
	lps := []Logprob{
		{Token: "Hi", Logprob: -0.25, Top: []TopLogprob{{"Hi", -0.25}, {"Yo", -1.5}}},
		{Token: "\xe4\xb8", Logprob: float32(math.Inf(-1))},
	}
	chat := AppendChatLogprobs(nil, lps)
	want := `{"content":[{"token":"Hi","logprob":-0.25,"bytes":[72,105],"top_logprobs":[{"token":"Hi","logprob":-0.25,"bytes":[72,105]},{"token":"Yo","logprob":-1.5,"bytes":[89,111]}]},` +
		`{"token":"\ufffd\ufffd","logprob":-9999,"bytes":[228,184],"top_logprobs":[]}]}`
	if string(chat) != want {
		t.Fatalf("chat:\n got %s\nwant %s", chat, want)
	}
	cmpl, next := AppendCompletionLogprobs(nil, lps, 3)
	want = `{"tokens":["Hi","\ufffd\ufffd"],"token_logprobs":[-0.25,-9999],"top_logprobs":[{"Hi":-0.25,"Yo":-1.5},{"\ufffd\ufffd":-9999}],"text_offset":[3,5]}`
	if string(cmpl) != want || next != 7 {
		t.Fatalf("completion:\n got %s (%d)\nwant %s", cmpl, next, want)
	}
	cmpl, _ = AppendCompletionLogprobs(nil, []Logprob{{Token: "Hi", Logprob: -0.25}}, 0)
	if string(cmpl) != `{"tokens":["Hi"],"token_logprobs":[-0.25],"top_logprobs":[{"Hi":-0.25}],"text_offset":[0]}` {
		t.Fatalf("no top: %s", cmpl)
	}
	for _, b := range [][]byte{chat, cmpl} {
		if !json.Valid(b) {
			t.Fatalf("not JSON: %s", b)
		}
	}
	h := ChunkHeader{ID: "c", Model: "m", Created: 1, Chat: true, Index: 2}
	got := string(h.AppendChunkLogprobs(nil, "Hi", "", AppendChatLogprobs(nil, lps[:1])))
	if want := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":2,"delta":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi","logprob":-0.25,"bytes":[72,105],"top_logprobs":[{"token":"Hi","logprob":-0.25,"bytes":[72,105]},{"token":"Yo","logprob":-1.5,"bytes":[89,111]}]}]},"finish_reason":null}]}` + "\n\n"; got != want {
		t.Fatalf("chunk:\n got %s\nwant %s", got, want)
	}
}
