package native

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/structured"
	"github.com/tandemllm/tandem/tokenid"
	"github.com/tandemllm/tandem/tokenizer"
)

// BenchmarkConstrainedDecode: decode of a random-weight tiny Qwen3-shaped
// model (151,669-token vocabulary) with a JSON Schema constraint against
// the same model unconstrained, side by side in one run; ns/token each,
// wall clock and the process's CPU time (the figure that holds on a
// loaded machine).
// The compiled schema is cached after the first request, as for repeated
// requests of one schema.
func BenchmarkConstrainedDecode(b *testing.B) {
	home, _ := os.UserHomeDir()
	tokDir := filepath.Join(home, ".cache", "tandem", "tokenizers", "qwen3")
	if _, err := os.Stat(filepath.Join(tokDir, "tokenizer.json")); err != nil {
		b.Skip("no Qwen3 tokenizer (scripts/fetch-qwen3-tokenizer.sh)")
	}
	dir := filepath.Join(b.TempDir(), "m")
	if err := GenerateModel(dir, GenOptions{Shape: "tiny-qwen3", Seed: 1, HF: true, Tokenizer: tokDir}); err != nil {
		b.Fatal(err)
	}
	tm, err := tokenizer.LoadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	tok := tm.Tokenizer
	sp, _ := tok.(tokenizer.SpecialTokens)
	toks := make([][]byte, tok.VocabSize())
	for id := range toks {
		if sp != nil && sp.IsSpecial(tokenid.ID(id)) {
			continue
		}
		toks[id] = tok.AppendTokenBytes(nil, tokenid.ID(id))
	}
	vocab, err := structured.NewVocab(toks, tok.EOS())
	if err != nil {
		b.Fatal(err)
	}
	e, _, err := Load(dir, Options{Threads: 1, Vocab: vocab})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	prompt := tok.Encode("Write the record as JSON.")
	const n = 64
	// Long enough that every request runs to n tokens.
	schema := `{"type":"object","properties":{"notes":{"type":"array","items":{"type":"string","minLength":8,"maxLength":40},"minItems":40}},"required":["notes"],"additionalProperties":false}`
	run := func(b *testing.B, c *engine.Constraint) {
		var toksOut int
		var elapsed, cpu time.Duration
		for i := range b.N {
			req := &engine.Request{Prompt: prompt, MaxTokens: n, Constraint: c,
				Sampling: engine.Sampling{Temperature: 1, Seed: uint64(i), HasSeed: true}}
			t0, c0 := time.Now(), processCPU()
			s, err := e.Generate(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			for {
				d, err := s.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				toksOut += len(d.Tokens)
			}
			elapsed += time.Since(t0)
			cpu += processCPU() - c0
		}
		b.ReportMetric(float64(elapsed.Nanoseconds())/float64(toksOut), "ns/token")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(toksOut), "cpu-ns/token")
	}
	b.Run("unconstrained", func(b *testing.B) { run(b, nil) })
	b.Run("schema", func(b *testing.B) {
		run(b, &engine.Constraint{Kind: engine.ConstraintJSONSchema, Spec: schema})
	})
}
