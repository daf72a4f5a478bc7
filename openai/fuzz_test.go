package openai

import "testing"

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
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, dec := range []func([]byte) *Error{
			func(b []byte) *Error { _, e := DecodeChat(b); return e },
			func(b []byte) *Error { _, e := DecodeCompletion(b); return e },
		} {
			if e := dec(body); e != nil && (e.Status < 400 || e.Status >= 500 || e.Message == "") {
				t.Fatalf("bad error for %q: %+v", body, e)
			}
		}
	})
}
