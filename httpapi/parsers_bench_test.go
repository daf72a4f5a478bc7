package httpapi

import (
	"bufio"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
)

// BenchmarkChatParsersTTFT: time from sending a streamed chat request to
// its first content chunk, with no chat parser and with the hermes
// tool-call and qwen3 reasoning parsers, requests interleaved in one run
// (an instant engine, so the frontend is all there is). Reports each
// side's p50 and the ratio; the parsers' target is nothing measurable on
// TTFT (docs/benchmarks.md).
func BenchmarkChatParsersTTFT(b *testing.B) {
	out := append(toks("The answer is 42, as always."), tokEnd)
	eng := &enginetest.Scripted{Name: "m", Output: out, EOS: []engine.Token{tokEnd}}
	t := &testing.T{}
	plain := DefaultConfig()
	plain.ToolCallParser, plain.ReasoningParser = "none", "none"
	parsed := DefaultConfig()
	parsed.ToolCallParser, parsed.ReasoningParser = "hermes", "qwen3"
	withParsers := newFixtureCfg(t, parsed, 4096, map[string]engine.Generator{"w0": eng})
	sides := []*fixture{newFixtureCfg(t, plain, 4096, map[string]engine.Generator{"w0": eng}), withParsers, withParsers}
	// Three sides: no parser; the parsers on the same request; the
	// parsers and a tool in the request (its decoding and rendering
	// included: a model without a tool-call parser refuses tools).
	plainBody := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	bodies := []string{plainBody, plainBody,
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	ttft := func(f *fixture, body string) time.Duration {
		req, _ := http.NewRequest("POST", f.url+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		sc := bufio.NewScanner(resp.Body)
		var first time.Duration
		for sc.Scan() {
			if first == 0 && strings.Contains(sc.Text(), `"content":"`) && !strings.Contains(sc.Text(), `"content":""`) {
				first = time.Since(start)
			}
		}
		if first == 0 {
			b.Fatal("no content chunk")
		}
		return first
	}
	var got [3][]time.Duration
	for i := 0; b.Loop(); i++ {
		side := i % 3
		got[side] = append(got[side], ttft(sides[side], bodies[side]))
	}
	if len(got[2]) == 0 {
		return
	}
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds())
	}
	none, with, tools := p50(got[0]), p50(got[1]), p50(got[2])
	b.ReportMetric(none, "p50-none-µs")
	b.ReportMetric(with, "p50-parsers-µs")
	b.ReportMetric(tools, "p50-parsers+tool-µs")
	if none > 0 {
		b.ReportMetric(with/none, "ratio")
	}
}
