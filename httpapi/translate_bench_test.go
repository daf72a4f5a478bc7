package httpapi

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
)

// BenchmarkTranslatedStream: one streamed request of 16 tokens from an
// instant engine through chat, and through the Responses and Messages
// translators over the same chat path, in one run: the difference is
// what translating costs a request (request building, chunk parsing,
// event encoding).
func BenchmarkTranslatedStream(b *testing.B) {
	out := append(toks("abcdefghijklmno"), tokEnd)
	eng := &enginetest.Scripted{Name: "m", Output: out, EOS: []engine.Token{tokEnd}}
	t := &testing.T{}
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": eng})
	cases := []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}`},
		{"responses", "/v1/responses", `{"model":"m","stream":true,"store":false,"input":"hello"}`},
		{"messages", "/v1/messages", `{"model":"m","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`},
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				req, _ := http.NewRequest("POST", f.url+c.path, strings.NewReader(c.body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("%s: %d", c.path, resp.StatusCode)
				}
			}
		})
	}
}
