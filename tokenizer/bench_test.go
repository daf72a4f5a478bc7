package tokenizer

import (
	"os"
	"path/filepath"
	"testing"
)

func benchPrompt(b *testing.B) string {
	data, err := os.ReadFile(filepath.Join("testdata", "bench-prompt.txt"))
	if err != nil {
		b.Fatal(err)
	}
	return string(data)
}

const benchShortChat = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is the capital of France? Answer in one word.<|im_end|>\n<|im_start|>assistant\n"

func benchEncode(b *testing.B, tok Tokenizer, text string) {
	n := len(tok.Encode(text))
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		tok.Encode(text)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(n), "tokens/op")
}

// BenchmarkEncodeDefault1500Words is the long-prompt figure: ~1,500 English
// words with the built-in o200k tokenizer.
func BenchmarkEncodeDefault1500Words(b *testing.B) {
	benchEncode(b, testDefault(b).Tokenizer, benchPrompt(b))
}

// BenchmarkEncodeDefaultShortChat is a rendered short chat request, the
// frontend's per-request cost.
func BenchmarkEncodeDefaultShortChat(b *testing.B) {
	benchEncode(b, testDefault(b).Tokenizer, benchShortChat)
}

func BenchmarkEncodeQwen31500Words(b *testing.B) {
	benchEncode(b, testQwen3(b).Tokenizer, benchPrompt(b))
}

func BenchmarkEncodeLlama2C1500Words(b *testing.B) {
	benchEncode(b, testStories(b), benchPrompt(b))
}

// BenchmarkEncodeTiktokenGo1500Words is tiktoken-go's own encoder on the same
// ranks, for comparison with BenchmarkEncodeDefault1500Words.
func BenchmarkEncodeTiktokenGo1500Words(b *testing.B) {
	ref := tiktokenGoReference(b)
	text := benchPrompt(b)
	n := len(ref.Encode(text, []string{"all"}, nil))
	b.ReportAllocs()
	for b.Loop() {
		ref.Encode(text, []string{"all"}, nil)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

func BenchmarkEncodeTiktokenGoShortChat(b *testing.B) {
	ref := tiktokenGoReference(b)
	b.ReportAllocs()
	for b.Loop() {
		ref.Encode(benchShortChat, []string{"all"}, nil)
	}
}

// BenchmarkDetokenizerAdd measures one Add per token over the long prompt
// (ns/op and allocs/op are per token).
func BenchmarkDetokenizerAdd(b *testing.B) {
	tok := testDefault(b).Tokenizer
	ids := tok.Encode(benchPrompt(b) + " 中文分词测试 🎉🔥👍🏽 日本語")
	d := NewDetokenizer(tok)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d.Add(ids[i])
		if i++; i == len(ids) {
			i = 0
		}
	}
}

func BenchmarkDetokenizerAddLlama2C(b *testing.B) {
	tok := testStories(b)
	ids := tok.Encode(benchPrompt(b))
	d := NewDetokenizer(tok)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d.Add(ids[i])
		if i++; i == len(ids) {
			i = 0
		}
	}
}

func BenchmarkRenderChatML(b *testing.B) {
	m := testDefault(b)
	in := ChatInput{Messages: []byte(`[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France? Answer in one word."}]`), AddGenerationPrompt: true}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Template.Render(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDefault(b *testing.B) {
	for b.Loop() {
		if _, err := Default(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoadDirQwen3(b *testing.B) {
	testQwen3(b)
	for b.Loop() {
		if _, err := LoadDir(qwenDir); err != nil {
			b.Fatal(err)
		}
	}
}
