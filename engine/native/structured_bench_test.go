package native

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/internal/sharedfiles"
	"github.com/tandemllm/tandem/structured"
)

// coldSchemas numbers the schemas BenchmarkConstrainedDecode makes new to
// the process, so that no two requests of its cold arm share one.
var coldSchemas atomic.Int64

// BenchmarkConstrainedDecode: decode with a JSON Schema constraint against
// the same model unconstrained, measured in the same run: each round runs
// one request of each arm, the arms' order rotating from round to round
// (ABC, BCA, CAB, ...) so that a machine's load drift falls on every arm
// alike. Arms: unconstrained; schema (one schema, its masks cached after
// the first request, as for repeated requests of one schema); schema-cold
// (a schema new to the process every request: each mask is computed on
// the decode path as the sequence first reaches its state). Each request
// decodes n tokens (the unconstrained arm ignores EOS; the schema cannot
// end sooner); only the decode is timed, from the first token to the
// last, in wall time and in the process's CPU time (the figure that holds
// on a loaded machine), per token. The ratios are unconstrained time per
// token over the arm's: the constrained decode's speed as a fraction of
// the unconstrained one (issue 36's target: at least 0.95 at 0.6B).
//
// The model: TANDEM_SO_BENCH_MODEL (a GGUF file or Hugging Face
// directory carrying its tokenizer, such as `tandem model gen --shape
// 0.6b --dtype q8_0 --tokenizer ~/.cache/tandem/tokenizers/qwen3 --out
// /tmp/qwen3-0.6b-q8_0.gguf`), else a random-weight tiny-qwen3 (Qwen3's
// 151,669-token vocabulary) generated here. Sub-benchmarks for greedy
// decoding (argmax: the constraint's own cost alone, masks and the
// matcher) and temperature 1 (the sampler then sorts only the tokens the
// mask allows).
func BenchmarkConstrainedDecode(b *testing.B) {
	path := os.Getenv("TANDEM_SO_BENCH_MODEL")
	if path == "" {
		tokDir, err := sharedfiles.Qwen3Tokenizer()
		if err != nil {
			b.Skip(err)
		}
		path = filepath.Join(b.TempDir(), "m")
		if err := GenerateModel(path, GenOptions{Shape: "tiny-qwen3", Seed: 1, HF: true, Tokenizer: tokDir}); err != nil {
			b.Fatal(err)
		}
	}
	l, err := LoadModel(path)
	if err != nil {
		b.Fatal(err)
	}
	tm, err := ServedModelLoaded(l, "")
	if err != nil {
		b.Fatal(err)
	}
	vocab, err := structured.TokenizerVocab(tm.Tokenizer)
	if err != nil {
		b.Fatal(err)
	}
	e, err := New(l.Model, Options{Threads: 1, Vocab: vocab})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	prompt := tm.Tokenizer.Encode("Write the record as JSON.")
	const n = 64
	// Long enough that no request ends before n tokens.
	schemaOf := func(maxLen int64) string {
		return fmt.Sprintf(`{"type":"object","properties":{"notes":{"type":"array","items":{"type":"string","minLength":8,"maxLength":%d},"minItems":40}},"required":["notes"],"additionalProperties":false}`, maxLen)
	}
	warm := &engine.Constraint{Kind: engine.ConstraintJSONSchema, Spec: schemaOf(40)}
	arms := []struct {
		name       string
		constraint func() *engine.Constraint
	}{
		{"unconstrained", func() *engine.Constraint { return nil }},
		{"schema", func() *engine.Constraint { return warm }},
		{"schema-cold", func() *engine.Constraint {
			return &engine.Constraint{Kind: engine.ConstraintJSONSchema, Spec: schemaOf(1000 + coldSchemas.Add(1))}
		}},
	}
	type acc struct {
		toks      int
		wall, cpu time.Duration
	}
	// decode runs one request and adds its decode (tokens after the
	// first) to a; it returns the tokens.
	decode := func(b *testing.B, c *engine.Constraint, temp float32, seed uint64, a *acc) []int32 {
		req := &engine.Request{Prompt: prompt, MaxTokens: n, Constraint: c, IgnoreEOS: c == nil,
			Sampling: engine.Sampling{Temperature: temp, Seed: seed, HasSeed: true}}
		s, err := e.Generate(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		var t0 time.Time
		var c0 time.Duration
		got := 0
		var toks []int32
		for {
			d, err := s.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			toks = append(toks, d.Tokens...)
			if got == 0 && len(d.Tokens) > 0 {
				t0, c0 = time.Now(), processCPU()
				got = len(d.Tokens)
				continue
			}
			got += len(d.Tokens)
		}
		if got < n {
			b.Fatalf("constraint %v: %d of %d tokens", c != nil, got, n)
		}
		a.wall += time.Since(t0)
		a.cpu += processCPU() - c0
		a.toks += got - 1
		return toks
	}
	// overhead replays a constrained output through a fresh matcher of
	// c: per token, the thread CPU time of the constrained step (the
	// engine's sampleConstrained, which reads the mask, computing it where
	// not cached, then the matcher's Accept) less that of the
	// unconstrained step (the sampler alone) on the same logits: the
	// constraint's own cost on the decode path, which the forward pass
	// does not hide.
	logits := make([]float32, l.Model.Config.Vocab)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range logits {
		logits[i] = float32(rng.NormFloat64())
	}
	overhead := func(b *testing.B, c *engine.Constraint, temp float32, toks []int32) float64 {
		m, err := structured.ForRequest(c, vocab)
		if err != nil {
			b.Fatal(err)
		}
		p := engine.Sampling{Temperature: temp, Seed: 1, HasSeed: true}
		sc, su := newSampler(p, 0), newSampler(p, 0)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		buf := make([]float32, len(logits))
		var cpu time.Duration
		for _, tok := range toks {
			copy(buf, logits)
			c0 := threadCPU()
			su.sample(buf)
			c1 := threadCPU()
			if _, err := sampleConstrained(sc, m, buf, false); err != nil {
				b.Fatal(err)
			}
			if err := m.Accept(tok); err != nil {
				b.Fatal(err)
			}
			cpu += threadCPU() - c1 - (c1 - c0)
		}
		return float64(cpu.Nanoseconds()) / float64(len(toks))
	}
	for _, temp := range []float32{0, 1} {
		b.Run(fmt.Sprintf("temp=%g", temp), func(b *testing.B) {
			// Warm-up requests: the weights paged in, the repeated schema
			// compiled and its masks cached (compiling is the cold arm's
			// business).
			decode(b, nil, temp, 0, &acc{})
			decode(b, warm, temp, 0, &acc{})
			res := make([]acc, len(arms))
			var out []int32
			b.ResetTimer()
			for i := range b.N {
				for j := range arms {
					k := (i + j) % len(arms)
					toks := decode(b, arms[k].constraint(), temp, uint64(i), &res[k])
					if k == 1 {
						out = toks
					}
				}
			}
			b.StopTimer()
			per := func(d time.Duration, a acc) float64 { return float64(d.Nanoseconds()) / float64(a.toks) }
			base := res[0]
			for k, a := range res {
				b.ReportMetric(per(a.wall, a)/1e6, arms[k].name+"-ms/token")
				b.ReportMetric(per(a.cpu, a)/1e6, arms[k].name+"-cpu-ms/token")
				if k > 0 {
					b.ReportMetric(per(base.wall, base)/per(a.wall, a), arms[k].name+"-ratio")
					b.ReportMetric(per(base.cpu, base)/per(a.cpu, a), arms[k].name+"-cpu-ratio")
				}
			}
			// The constraint's own cost against the unconstrained decode's
			// CPU per token: the ratio with the load's noise taken out.
			for k, name := range []string{"schema", "schema-cold"} {
				ov := overhead(b, arms[k+1].constraint(), temp, out)
				b.ReportMetric(ov/1e3, name+"-overhead-us/token")
				b.ReportMetric(per(base.cpu, base)/(per(base.cpu, base)+ov), name+"-overhead-ratio")
			}
		})
	}
}
