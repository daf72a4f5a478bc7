package chatparse

import (
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
)

// chunks splits a reply into the deltas a detokenizer would send: about
// four bytes (one token) each, never inside a rune.
func chunks(s string) []string {
	var out []string
	for len(s) > 0 {
		n := min(4, len(s))
		for n < len(s) && s[n]&0xC0 == 0x80 {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// benchReplies are one reply per family shape: reasoning, then content,
// then a call.
var benchReplies = map[string]struct {
	o     Options
	reply string
}{
	"hermes+qwen3": {Options{ToolParser: "hermes", ReasoningParser: "qwen3"},
		"<think>\n" + strings.Repeat("The user asks about the weather, so I will call the tool. ", 8) + "</think>\n\n" + strings.Repeat("Let me check that for you. ", 4) +
			"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>"},
	"qwen3_coder": {Options{ToolParser: "qwen3_coder", Tools: weatherTools},
		strings.Repeat("I'll look it up now. ", 8) + "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"},
	"harmony": {Options{ToolParser: "openai", ReasoningParser: "gpt_oss"},
		"<|channel|>analysis<|message|>" + strings.Repeat("Need the weather tool for this. ", 8) + "<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>"},
	"plain": {Options{ToolParser: "hermes"}, strings.Repeat("Once upon a time, in a town beside a wide green river, there lived a clockmaker. ", 8)},
}

// BenchmarkStreamChunk is the cost of parsing one streamed chunk (a token's
// text), per family; it reports the p50 and p99 of per-chunk times too.
func BenchmarkStreamChunk(b *testing.B) {
	for name, c := range benchReplies {
		b.Run(name, func(b *testing.B) {
			cs := chunks(c.reply)
			c.o.NewID = seqID()
			b.ReportAllocs()
			lat := make([]time.Duration, 0, 4096)
			b.ResetTimer()
			n := 0
			for n < b.N {
				s, _ := New(c.o)
				for _, ch := range cs {
					t0 := time.Now()
					s.Feed(ch)
					if len(lat) < cap(lat) {
						lat = append(lat, time.Since(t0))
					}
					n++
				}
				s.Flush()
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns/chunk")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns/chunk")
		})
	}
}

// TestLongReasoningMemoryFlat: a 32k-token reasoning stream is released as
// it comes (nothing accumulates inside the parser), so the heap does not
// grow with the stream.
func TestLongReasoningMemoryFlat(t *testing.T) {
	for _, o := range []Options{
		{ToolParser: "hermes", ReasoningParser: "qwen3"},
		{ToolParser: "openai", ReasoningParser: "gpt_oss"},
		{ReasoningParser: "deepseek_r1", PromptOpensReasoning: true},
	} {
		s, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		start := "<think>"
		if o.ReasoningParser == "gpt_oss" {
			start = "<|channel|>analysis<|message|>"
		}
		if o.PromptOpensReasoning {
			start = ""
		}
		s.Feed(start)
		tokens := []string{" the", " weather", " in", " Paris", " is", " <", "think", "ing", "/", " about", "\n"}
		var released int
		var m0, m1 runtime.MemStats
		for i := 0; i < 32768; i++ {
			if i == 1024 {
				runtime.GC()
				runtime.ReadMemStats(&m0)
			}
			out := s.Feed(tokens[i%len(tokens)])
			released += len(out.Reasoning)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		if grow := int64(m1.HeapAlloc) - int64(m0.HeapAlloc); grow > 256<<10 {
			t.Errorf("%+v: heap grew %d bytes over 31k tokens", o, grow)
		}
		if released == 0 {
			t.Errorf("%+v: nothing released as reasoning", o)
		}
		if h := heldBytes(s); h > 64 {
			t.Errorf("%+v: the parser holds %d bytes", o, h)
		}
	}
}

// heldBytes is what a Stream holds back.
func heldBytes(s *Stream) int {
	n := 0
	if r, ok := s.r.(*tagReasoner); ok {
		n += len(r.held)
	}
	if p, ok := s.t.(*sectionParser); ok {
		n += len(p.held) + len(p.space)
	}
	if h, ok := s.combined.(*harmony); ok {
		n += len(h.held)
	}
	return n
}
