package openai

import (
	"encoding/json"
	"testing"
)

// FuzzDecode checks that no body makes the decoders panic, and that every
// rejection is a well-formed 4xx with a message.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stop":["x","y"],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m","prompt":[[1,2,3]],"max_tokens":4}`,
		`{"model":"m","prompt":"x","n":2}`,
		`{"model":"m","prompt":[7,8],"return_token_ids":true,"stream":true}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"return_token_ids":"true"}`,
		`{"model":`, `[]`, `null`, `{"messages":{}}`,
		// Issue 12's lax inputs.
		`{"model":"m","prompt":[null,null,5]}`, `{"model":"m","prompt":[[[[[7]]]]]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[1,"x",null]}`,
		`{"model":"m","prompt":"x","n":-1,"max_tokens":9223372036854775807}`,
		`{"model":"m","prompt":"x","stop_token_ids":[-1],"min_tokens":-9223372036854775808}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":20,"n":3}`,
		`{"model":"m","prompt":"x","logprobs":5}`, `{"model":"m","prompt":"x","logprobs":"5"}`,
		`{"prompt":"x","add_special_tokens":false,"return_token_strs":true}`, `{"tokens":[1,2,3]}`, `{"tokens":[1,-1,1.5]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, dec := range []func([]byte) *Error{
			func(b []byte) *Error { _, e := DecodeChat(b); return e },
			func(b []byte) *Error { _, e := DecodeCompletion(b); return e },
			func(b []byte) *Error { _, e := DecodeTokenize(b); return e },
			func(b []byte) *Error { _, e := DecodeDetokenize(b); return e },
		} {
			if e := dec(body); e != nil && (e.Status < 400 || e.Status >= 500 || e.Message == "") {
				t.Fatalf("bad error for %q: %+v", body, e)
			}
		}
	})
}

// FuzzPlainTokenIDs: the hand-written fast path for token-id prompts
// accepts only what the general path accepts, with the same ids.
func FuzzPlainTokenIDs(f *testing.F) {
	for _, s := range []string{`[1,2,3]`, `[ 0 , 2147483647 ]`, `[2147483648]`, `[01]`, `[-1]`, `[1.0]`, `[]`, `[1,]`, `["a"]`, `[[1]]`, `[1] x`, `[1e3]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '[' {
			return
		}
		ids, ok := plainTokenIDs(b)
		if !ok {
			return
		}
		var want []int64
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json rejects it: %v", b, err)
		}
		if len(want) != len(ids) || len(ids) == 0 {
			t.Fatalf("%q: %v vs %v", b, ids, want)
		}
		for i := range ids {
			if int64(ids[i]) != want[i] || want[i] < 0 {
				t.Fatalf("%q: %v vs %v", b, ids, want)
			}
		}
	})
}
