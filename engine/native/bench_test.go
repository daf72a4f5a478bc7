package native

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/native/kernels"
	"github.com/tandemllm/tandem/engine/native/model"
)

// benchShapes is overridden by TANDEM_BENCH_SHAPES (comma-separated) so a
// quick run can skip the big shapes.
func benchShapes() []string {
	if s := os.Getenv("TANDEM_BENCH_SHAPES"); s != "" {
		return strings.Split(s, ",")
	}
	return []string{"15m", "42m", "110m"}
}

// BenchmarkForward reports decode tokens/s (64 single-token steps from
// position 0, as llama2.c's run measures) and prefill tokens/s (one
// 128-token forward) for each shape, weight type and thread count.
func BenchmarkForward(b *testing.B) {
	for _, shape := range benchShapes() {
		c, err := model.Shape(shape)
		if err != nil {
			b.Fatal(err)
		}
		m, err := model.Generate(c, 1)
		if err != nil {
			b.Fatal(err)
		}
		for _, dt := range []string{"f32", "q8_0"} {
			if dt == "q8_0" {
				if err := m.Quantize(); err != nil {
					b.Fatal(err)
				}
			}
			for _, threads := range []int{1, 2} {
				pool := kernels.NewPool(threads)
				kv, _ := model.NewKVStore(&m.Config, 16, 16)
				blocks := make([]int32, 16)
				for i := range blocks {
					blocks[i] = int32(i)
				}
				logits := make([]float32, c.Vocab)
				st := &model.State{}
				ctx := context.Background()
				name := fmt.Sprintf("%s/%s/%dT", shape, dt, threads)
				b.Run("decode/"+name, func(b *testing.B) {
					steps := 0
					start := time.Now()
					for b.Loop() {
						for pos := range 64 {
							if err := m.Forward(ctx, pool, st, kv, []model.Seq{{Tokens: []int32{int32(pos + 5)}, Pos: pos, Blocks: blocks, Logits: logits}}); err != nil {
								b.Fatal(err)
							}
							steps++
						}
					}
					b.ReportMetric(float64(steps)/time.Since(start).Seconds(), "tok/s")
				})
				prompt := make([]int32, 128)
				for i := range prompt {
					prompt[i] = int32(i*7) % int32(c.Vocab)
				}
				b.Run("prefill/"+name, func(b *testing.B) {
					n := 0
					start := time.Now()
					for b.Loop() {
						if err := m.Forward(ctx, pool, st, kv, []model.Seq{{Tokens: prompt, Blocks: blocks, Logits: logits}}); err != nil {
							b.Fatal(err)
						}
						n += len(prompt)
					}
					b.ReportMetric(float64(n)/time.Since(start).Seconds(), "tok/s")
				})
				pool.Close()
			}
		}
	}
}

// BenchmarkCachedPrefill measures a 2,000-token prompt whose first 1,800
// tokens are cached against the same prompt uncached, through the engine
// (so block lookup and scheduling are included). The ratio metric is the
// cached cost as a fraction of the uncached one.
func BenchmarkCachedPrefill(b *testing.B) {
	shape := os.Getenv("TANDEM_BENCH_PREFIX_SHAPE")
	if shape == "" {
		shape = "15m"
	}
	c, err := model.Shape(shape)
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.Generate(c, 1)
	if err != nil {
		b.Fatal(err)
	}
	e := newEngine(b, m, Options{MaxBatchTokens: 2048, StepTarget: time.Hour, KVBytes: 1 << 30})
	prefix := randPrompt(1800, 1, c.Vocab)
	run := func(tail uint64) (time.Duration, int) {
		p := append(append([]engine.Token(nil), prefix...), randPrompt(200, tail, c.Vocab)...)
		start := time.Now()
		s, err := e.Generate(context.Background(), &engine.Request{Prompt: p, MaxTokens: 1})
		if err != nil {
			b.Fatal(err)
		}
		r := collect(b, s)
		return time.Since(start), r.cached
	}
	var cold, warm time.Duration
	tail := uint64(100)
	for b.Loop() {
		// A fresh prefix each round makes the first run uncached.
		prefix = randPrompt(1800, tail, c.Vocab)
		d, cached := run(tail + 1)
		if cached != 0 {
			b.Fatalf("cold run cached %d", cached)
		}
		cold += d
		d, cached = run(tail + 2)
		if cached != 1792 {
			b.Fatalf("warm run cached %d, want 1792", cached)
		}
		warm += d
		tail += 3
	}
	b.ReportMetric(cold.Seconds()/float64(b.N), "cold-s")
	b.ReportMetric(warm.Seconds()/float64(b.N), "warm-s")
	b.ReportMetric(warm.Seconds()/cold.Seconds(), "ratio")
}

// BenchmarkGGUF reports, on random-weight GGUF files, prefill tokens/s of
// one 512-token prompt and decode tokens/s of 64 single-token steps after
// it (TestLlamaCppBench's Tandem half, without llama.cpp): shapes from
// TANDEM_BENCH_GGUF_SHAPES (default 110m), types from TANDEM_BENCH_TYPES
// (default q4_k_m,q8_0), one and two threads, the KV cache in
// TANDEM_BENCH_KV (f16, the CLI's default, or f32). cpu-ms/tok is the
// process's CPU time per token, which waiting for a core on a shared
// machine does not inflate.
func BenchmarkGGUF(b *testing.B) {
	list := func(k, def string) []string {
		if v := os.Getenv(k); v != "" {
			return strings.Split(v, ",")
		}
		return strings.Split(def, ",")
	}
	const prompt, decode = 512, 64
	toks := make([]int32, prompt)
	kvt, err := model.ParseKVType(list("TANDEM_BENCH_KV", "f16")[0])
	if err != nil {
		b.Fatal(err)
	}
	for _, shape := range list("TANDEM_BENCH_GGUF_SHAPES", "110m") {
		for _, qt := range list("TANDEM_BENCH_TYPES", "q4_k_m,q8_0") {
			path := filepath.Join(b.TempDir(), shape+"-"+qt+".gguf")
			if err := GenerateModelFile(path, shape, 1, qt); err != nil {
				b.Fatal(err)
			}
			m, err := model.LoadGGUF(path) // the weights alone (the file has no tokenizer)
			if err != nil {
				b.Fatal(err)
			}
			for i := range toks {
				toks[i] = int32(3 + (i*7919)%(m.Config.Vocab-3))
			}
			for _, threads := range []int{1, 2} {
				pool := kernels.NewPool(threads)
				kv, err := model.NewKVStoreOf(&m.Config, 16, (prompt+decode)/16+1, kvt)
				if err != nil {
					b.Fatal(err)
				}
				blocks := make([]int32, kv.NumBlocks)
				for i := range blocks {
					blocks[i] = int32(i)
				}
				st, logits := &model.State{}, make([]float32, m.Config.Vocab)
				forward := func(tokens []int32, pos int) {
					if err := m.Forward(context.Background(), pool, st, kv, []model.Seq{{Tokens: tokens, Pos: pos, Blocks: blocks, Logits: logits}}); err != nil {
						b.Fatal(err)
					}
				}
				name := fmt.Sprintf("%s/%s/%dT", shape, qt, threads)
				b.Run("prefill/"+name, func(b *testing.B) {
					n, start, c0 := 0, time.Now(), processCPU()
					for b.Loop() {
						forward(toks, 0)
						n += prompt
					}
					b.ReportMetric(float64(n)/time.Since(start).Seconds(), "tok/s")
					b.ReportMetric(float64((processCPU()-c0).Microseconds())/1e3/float64(n), "cpu-ms/tok")
				})
				b.Run("decode/"+name, func(b *testing.B) {
					forward(toks, 0) // the prompt's KV, which the steps attend to
					n, start, c0 := 0, time.Now(), processCPU()
					for b.Loop() {
						for i := range decode {
							forward(toks[i:i+1], prompt+i)
						}
						n += decode
					}
					b.ReportMetric(float64(n)/time.Since(start).Seconds(), "tok/s")
					b.ReportMetric(float64((processCPU()-c0).Microseconds())/1e3/float64(n), "cpu-ms/tok")
				})
				pool.Close()
			}
		}
	}
}
