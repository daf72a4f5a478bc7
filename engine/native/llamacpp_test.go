package native

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine/native/kernels"
	"github.com/tandemllm/tandem/engine/native/model"
	"github.com/tandemllm/tandem/internal/sharedfiles"
)

// The llama.cpp comparison: the same GGUF file run by Tandem and by
// llama.cpp as node-llama-cpp 3.21.1 ships it (prebuilt libllama for
// linux-x64), through testdata/llamacpp.mjs. The module is installed by
// scripts/install-node-llama-cpp.sh under ~/.cache/tandem (or
// $NODE_LLAMA_CPP_DIR); without it and node, the tests skip. By default
// ggml picks its CPU backend variant for this CPU, as node-llama-cpp users
// get it; TANDEM_LLAMACPP_CPU=<variant> pins one (pinLlamaCppCPU).

func llamaCppDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("NODE_LLAMA_CPP_DIR")
	if dir == "" {
		dir = filepath.Join(sharedfiles.CacheDir(), "node-llama-cpp-3.21.1")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-llama-cpp", "package.json")); err != nil {
		t.Skipf("node-llama-cpp not installed (scripts/install-node-llama-cpp.sh): %v", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not on PATH")
	}
	// Minutes on two cores: a .ci/run step runs them.
	if os.Getenv("TANDEM_LLAMACPP") == "" {
		t.Skip("set TANDEM_LLAMACPP=1 to compare with llama.cpp")
	}
	if v := os.Getenv("TANDEM_LLAMACPP_CPU"); v != "" {
		return pinLlamaCppCPU(t, dir, v)
	}
	return dir
}

// pinLlamaCppCPU is the opt-in TANDEM_LLAMACPP_CPU=<variant> (icelake,
// haswell, ...): a node-llama-cpp tree in a temporary directory whose
// prebuilt binaries hold one CPU backend, libggml-cpu-<variant>.so, so that
// llama.cpp runs that variant instead of the one it picks for this CPU.
//
// How the variant is picked: node-llama-cpp's Llama constructor
// (src/bindings/Llama.ts, https://github.com/withcatai/node-llama-cpp)
// calls the addon's loadBackends (llama/addon/addon.cpp), that is
// ggml_backend_load_all_from_path, on the directory of llama-addon.node;
// ggml_backend_load_best
// (https://github.com/ggml-org/llama.cpp/blob/master/ggml/src/ggml-backend-reg.cpp)
// opens every regular file (symlinks followed) named libggml-cpu-*.so
// there, asks each for ggml_backend_score (ggml-cpu/arch/x86/cpu-feats.cpp:
// 0 if the CPU lacks a feature the variant was built with, else a sum of
// feature bits, AMX_INT8 the highest) and loads the best. Neither project
// reads a setting that names the variant (ggml's GGML_BACKEND_PATH loads
// one backend more, beside the chosen one). The directory of
// llama-addon.node comes from import.meta.url of @node-llama-cpp/linux-x64's
// dist/index.js, and Node resolves modules through symlinks to their real
// paths, so that package's dist and node-llama-cpp's dist (which imports
// it) are copied (6 MB); everything else is a symlink to dir.
func pinLlamaCppCPU(t testing.TB, dir, variant string) string {
	t.Helper()
	src, dst := filepath.Join(dir, "node_modules"), filepath.Join(t.TempDir(), "node_modules")
	const bins = "@node-llama-cpp/linux-x64/bins/linux-x64"
	keep := "libggml-cpu-" + variant + ".so"
	if _, err := os.Stat(filepath.Join(src, bins, keep)); err != nil {
		var have []string
		paths, _ := filepath.Glob(filepath.Join(src, bins, "libggml-cpu-*.so"))
		for _, p := range paths {
			have = append(have, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "libggml-cpu-"), ".so"))
		}
		t.Fatalf("TANDEM_LLAMACPP_CPU=%s: no %s in %s (variants: %s)", variant, keep, filepath.Join(src, bins), strings.Join(have, ", "))
	}
	mirrored := map[string]bool{".": true, "node-llama-cpp": true, "@node-llama-cpp": true,
		"@node-llama-cpp/linux-x64": true, "@node-llama-cpp/linux-x64/bins": true, bins: true}
	copied := map[string]bool{"node-llama-cpp/dist": true, "@node-llama-cpp/linux-x64/dist": true}
	var mirror func(rel string) error
	mirror = func(rel string) error {
		ents, err := os.ReadDir(filepath.Join(src, rel))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, rel), 0o755); err != nil {
			return err
		}
		for _, e := range ents {
			r := filepath.ToSlash(filepath.Join(rel, e.Name()))
			switch {
			case mirrored[r]:
				err = mirror(r)
			case copied[r]:
				err = os.CopyFS(filepath.Join(dst, r), os.DirFS(filepath.Join(src, r)))
			case rel == bins && strings.HasPrefix(e.Name(), "libggml-cpu-") && e.Name() != keep:
			default:
				err = os.Symlink(filepath.Join(src, r), filepath.Join(dst, r))
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := mirror("."); err != nil {
		t.Fatalf("TANDEM_LLAMACPP_CPU=%s: %v", variant, err)
	}
	return filepath.Dir(dst)
}

type llamaReq struct {
	Model    string         `json:"model"`
	Threads  int            `json:"threads"`
	Tokenize []string       `json:"tokenize,omitempty"`
	Prompt   []int32        `json:"prompt,omitempty"`
	Generate int            `json:"generate,omitempty"`
	Probs    int            `json:"probs,omitempty"`
	KV       string         `json:"kv,omitempty"`
	Bench    map[string]int `json:"bench,omitempty"`
}

type llamaResp struct {
	Tokens [][]int32          `json:"tokens"`
	Greedy []int32            `json:"greedy"`
	Probs  [][][2]float64     `json:"probs"`
	Bench  map[string]float64 `json:"bench"`
	CPU    string             `json:"cpu"` // the libggml-cpu-<variant>.so loaded
}

func runLlamaCpp(t testing.TB, dir string, req llamaReq) llamaResp {
	t.Helper()
	in, _ := json.Marshal(req)
	// Generous: on a shared two-core machine under load llama.cpp's
	// spinning thread pool slows down far more than the work does.
	limit := 5 * time.Minute
	if req.Bench != nil {
		limit = 20 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "llamacpp.mjs"))
	cmd.Env = append(os.Environ(), "NODE_LLAMA_CPP_DIR="+dir)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llama.cpp: %v\n%s", err, stderr.String())
	}
	var r llamaResp
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("llama.cpp reply: %v\n%s", err, out)
	}
	if v := os.Getenv("TANDEM_LLAMACPP_CPU"); v != "" && r.CPU != v {
		t.Fatalf("TANDEM_LLAMACPP_CPU=%s, but llama.cpp loaded CPU variant %q", v, r.CPU)
	}
	return r
}

// tandemSteps runs prompt then forced tokens through the model one step at
// a time, returning the next-token probabilities after the prompt and
// after each forced token (as the llama.cpp script reports them).
func tandemSteps(t testing.TB, m *model.Model, prompt, forced []int32) [][]float32 {
	t.Helper()
	pool := kernels.NewPool(2)
	defer pool.Close()
	n := len(prompt) + len(forced)
	bs := 16
	kv, err := model.NewKVStore(&m.Config, bs, (n+bs)/bs)
	if err != nil {
		t.Fatal(err)
	}
	blocks := make([]int32, kv.NumBlocks)
	for i := range blocks {
		blocks[i] = int32(i)
	}
	st := &model.State{}
	var out [][]float32
	step := func(toks []int32, pos int) {
		logits := make([]float32, m.Config.Vocab)
		if err := m.Forward(context.Background(), pool, st, kv, []model.Seq{{Tokens: toks, Pos: pos, Blocks: blocks, Logits: logits}}); err != nil {
			t.Fatal(err)
		}
		kernels.Softmax(logits)
		out = append(out, logits)
	}
	step(prompt, 0)
	for i, tok := range forced {
		step([]int32{tok}, len(prompt)+i)
	}
	return out
}

func argmax32(p []float32) int32 {
	best := 0
	for i, v := range p {
		if v > p[best] {
			best = i
		}
	}
	return int32(best)
}

// checkModel is one comparison: tokenization of texts, then greedy
// generation from prompt. exact: the greedy tokens must be identical for
// all n (F32/F16); otherwise the first 16 must be and every step's top-16
// probabilities must agree within probTol.
func checkModel(t *testing.T, dir, path string, texts []string, prompt []int32, n int, exact bool, probTol float64) {
	l, err := LoadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	r := runLlamaCpp(t, dir, llamaReq{Model: path, Threads: 2, Tokenize: texts, Prompt: prompt, Generate: n, Probs: 16, KV: "F32"})
	for i, s := range texts {
		if got := l.Tokenizer.Encode(s); !slices.Equal(got, r.Tokens[i]) {
			t.Errorf("tokenize %q:\n tandem    %v\n llama.cpp %v", s, got, r.Tokens[i])
		}
	}
	if len(r.Greedy) != n {
		t.Fatalf("llama.cpp generated %d tokens, want %d", len(r.Greedy), n)
	}
	steps := tandemSteps(t, l.Model, prompt, r.Greedy[:n-1])
	var worst float64
	for i, p := range steps {
		if got := argmax32(p); got != r.Greedy[i] && (exact || i < 16) {
			t.Fatalf("step %d: tandem picks %d, llama.cpp %d (greedy so far %v)", i, got, r.Greedy[i], r.Greedy[:i])
		}
		for _, e := range r.Probs[i] {
			worst = max(worst, math.Abs(float64(p[int(e[0])])-e[1]))
		}
	}
	t.Logf("%s: %d tokenizations and %d greedy steps checked; largest top-16 probability difference %.2e", filepath.Base(path), len(texts), n, worst)
	if worst > probTol {
		t.Errorf("top-16 probabilities differ by %.3g, tolerance %.3g", worst, probTol)
	}
}

// testTexts are 200 deterministic strings: words, digits, punctuation,
// spacing, accents, CJK and emoji, each from a seeded mix, so both
// tokenizer kinds meet byte fallback, merges and pre-tokenizer splits.
func testTexts() []string {
	parts := []string{"Once", " upon", " a time", " there", " was", " a little", " girl", " named", " Lily", ".", ",", "!", "?",
		" 42", " 3.14159", " 2026-12-02", "  ", "\t", "\n", "\n\n", " don't", " it's", " ALL CAPS", " camelCase", " snake_case",
		" café", " naïve", " Zürich", " 中文", " 日本語", " 한국어", " 😀", " 🚀🚀", " $100", " #tag", " @user", " (paren)", " [x]",
		" {\"json\": true}", " x+y=z", " ...", " —", " «quote»", " e.g.", " ok", " 1234567", " a-b-c", " http://example.com/a?b=c"}
	r := model.NewRand(21)
	out := make([]string, 200)
	for i := range out {
		var b strings.Builder
		for range 1 + r.Uint64()%8 {
			b.WriteString(parts[r.Uint64()%uint64(len(parts))])
		}
		out[i] = b.String()
	}
	return out
}

// checkShape is a random-weight model with peaked logits: the tied
// embedding is scaled up (the first RMSNorm undoes the scale on the input
// side), so greedy choices have margins far above rounding differences.
func checkShape(t *testing.T, arch string, vocab *model.Vocab) *model.Model {
	c := model.Config{Arch: arch, Dim: 256, Hidden: 768, Layers: 4, Heads: 4, KVHeads: 2, HeadDim: 64, Vocab: len(vocab.Tokens),
		SeqLen: 256, RopeTheta: 10000, NormEps: 1e-5, Tied: true, Rope: model.RopeInterleaved}
	switch arch {
	case "qwen3":
		c.Rope, c.QKNorm, c.RopeTheta, c.NormEps = model.RopeHalf, true, 1e6, 1e-6
	case "qwen2":
		c.Rope, c.QKVBias = model.RopeHalf, true
	}
	m, err := model.Generate(c, 5)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Embed.F {
		m.Embed.F[i] *= 6
	}
	m.Vocab = vocab
	m.Source = "tandem-llamacpp-check-" + arch
	return m
}

func writeQuant(t *testing.T, m *model.Model, quant string) string {
	q, err := model.ParseQuant(quant)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("%s-%s.gguf", m.Config.Arch, quant))
	if err := writeFileAtomic(path, func(w *bufio.Writer) error { return model.WriteGGUFQuant(w, m, q) }); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLlamaCppStories260K: stories260K converted by Tandem to GGUF gives
// its golden text in llama.cpp, and Tandem's tokenizer agrees on the
// 200 strings.
func TestLlamaCppStories260K(t *testing.T) {
	dir := llamaCppDir(t)
	ref := refDir(t)
	path := filepath.Join(t.TempDir(), "stories260K.gguf")
	if err := QuantizeModelFile(filepath.Join(ref, "stories260K.bin"), path, "f32"); err != nil {
		t.Fatal(err)
	}
	l, err := LoadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	prompt := append([]int32{1}, l.Tokenizer.Encode("Once upon a time")...)
	r := runLlamaCpp(t, dir, llamaReq{Model: path, Threads: 1, Tokenize: testTexts(), Prompt: prompt, Generate: 60, KV: "F32"})
	want, _ := os.ReadFile(filepath.Join(ref, "golden-once-upon-a-time.txt"))
	if got := strings.TrimPrefix(l.Tokenizer.Decode(append(prompt[1:], r.Greedy...)), " ") + "\n"; got != string(want) {
		t.Fatalf("llama.cpp on Tandem's GGUF:\n got %q\nwant %q", got, want)
	}
	for i, s := range testTexts() {
		if got := l.Tokenizer.Encode(s); !slices.Equal(got, r.Tokens[i]) {
			t.Errorf("tokenize %q:\n tandem    %v\n llama.cpp %v", s, got, r.Tokens[i])
		}
	}
}

// TestLlamaCppAgreement: for each architecture and file type, Tandem and
// llama.cpp tokenize 200 strings identically and agree on greedy
// generation: 64 identical tokens for F32 and F16; for the quantized
// types the first 16 identical and the top-16 probabilities within the
// stated tolerance at every step (both quantize k-quant activations to
// Q8_K, one scale per 256 values; the engines still differ in summation
// order and in the other operations' rounding).
func TestLlamaCppAgreement(t *testing.T) {
	dir := llamaCppDir(t)
	spm, err := VocabFromFile(filepath.Join(refDir(t), "tok512.bin"))
	if err != nil {
		t.Fatal(err)
	}
	vocabs := map[string]*model.Vocab{"llama": spm}
	bpe, err := VocabFromFile(qwen3Dir(t))
	if err != nil {
		t.Fatal(err)
	}
	vocabs["qwen3"], vocabs["qwen2"] = bpe, bpe
	for _, arch := range []string{"llama", "qwen3", "qwen2"} {
		v := vocabs[arch]
		texts := testTexts()
		m := checkShape(t, arch, v)
		prompt := []int32{10, 200, 300, 40, 77}
		for _, c := range []struct {
			quant string
			exact bool
			tol   float64
		}{
			// F32's bound is F16's order, not float rounding's: on random
			// weights the two engines' F32 top-16 probabilities differ by
			// 1.2e-3 (Llama) to 2.8e-3 (Qwen2) with all 64 greedy tokens
			// identical. Where llama.cpp's F32 path loses the precision
			// (its SiLU/softmax approximations or RoPE in float) is not
			// yet found; the tokens, which the issue asks for, agree.
			{"f32", true, 5e-3}, {"f16", true, 1e-2}, {"q8_0", false, 0.1}, {"q4_0", false, 0.1},
			// Q4_K_M on Qwen2 reached 0.144-0.153 at some step while
			// Tandem quantized k-quant activations per 32 values and
			// llama.cpp per 256 (Qwen2's attention biases amplify the
			// rounding); with Q8_K activations in both it is 0.039
			// (0.03-0.05 on the others). The bound is kept for the
			// portable build and other CPUs.
			{"q4_k_m", false, 0.2}, {"q6_k", false, 0.1}} {
			// Two cores: every type on the small-vocabulary Llama, F32 and
			// Q4_K_M on the 151k-vocabulary Qwen shapes.
			if arch != "llama" && c.quant != "f32" && c.quant != "q4_k_m" {
				continue
			}
			t.Run(arch+"/"+c.quant, func(t *testing.T) {
				checkModel(t, dir, writeQuant(t, m, c.quant), texts, prompt, 64, c.exact, c.tol)
				texts = nil // tokenization once per vocabulary is enough
			})
		}
	}
}

// TestLlamaCppBench is the benchmark of docs/benchmarks/native.md: the same
// GGUF file in Tandem and in llama.cpp, prefill of a 512-token prompt and
// 64 decode steps, at 1 and 2 threads, best of TANDEM_BENCH_REPS (default
// 2) runs each, in one process run so the machine state is shared. Shapes
// from TANDEM_BENCH_SHAPES (default 110m), types from TANDEM_BENCH_TYPES
// (default q4_k_m,q8_0,f16). Gated: TANDEM_LLAMACPP_BENCH=1. The last
// column is the llama.cpp CPU backend variant that ran (TANDEM_LLAMACPP_CPU
// pins one; see pinLlamaCppCPU). Both engines keep the KV cache in
// TANDEM_BENCH_KV (f16, the default of both, or f32).
func TestLlamaCppBench(t *testing.T) {
	if os.Getenv("TANDEM_LLAMACPP_BENCH") == "" {
		t.Skip("set TANDEM_LLAMACPP_BENCH=1 (and TANDEM_LLAMACPP=1)")
	}
	dir := llamaCppDir(t)
	env := func(k, def string) []string {
		if v := os.Getenv(k); v != "" {
			return strings.Split(v, ",")
		}
		return strings.Split(def, ",")
	}
	reps := 2
	fmt.Sscan(os.Getenv("TANDEM_BENCH_REPS"), &reps)
	kvt, err := model.ParseKVType(env("TANDEM_BENCH_KV", "f16")[0])
	if err != nil {
		t.Fatal(err)
	}
	llamaKV := "" // llama.cpp's default cache type, F16
	if kvt == model.KVF32 {
		llamaKV = "F32"
	}
	const prompt, decode = 512, 64
	toks := make([]int32, prompt)
	for i := range toks {
		toks[i] = int32(3 + (i*7919)%200)
	}
	for _, shape := range env("TANDEM_BENCH_SHAPES", "110m") {
		for _, qt := range env("TANDEM_BENCH_TYPES", "q4_k_m,q8_0,f16") {
			path := filepath.Join(t.TempDir(), shape+"-"+qt+".gguf")
			tok := filepath.Join(refDir(t), "tok512.bin")
			if strings.HasPrefix(shape, "0.6b") || strings.HasPrefix(shape, "qwen") {
				tok = qwen3Dir(t)
			}
			if err := GenerateModel(path, GenOptions{Shape: shape, Seed: 1, DType: qt, Tokenizer: tok}); err != nil {
				t.Fatal(err)
			}
			l, err := LoadModel(path)
			if err != nil {
				t.Fatal(err)
			}
			m := l.Model
			for _, th := range []int{1, 2} {
				var pre, dec float64
				for range reps {
					pool := kernels.NewPool(th)
					kv, err := model.NewKVStoreOf(&m.Config, 16, (prompt+decode)/16+1, kvt)
					if err != nil {
						t.Fatal(err)
					}
					blocks := make([]int32, kv.NumBlocks)
					for i := range blocks {
						blocks[i] = int32(i)
					}
					st := &model.State{}
					logits := make([]float32, m.Config.Vocab)
					start := time.Now()
					if err := m.Forward(context.Background(), pool, st, kv, []model.Seq{{Tokens: toks, Blocks: blocks, Logits: logits}}); err != nil {
						t.Fatal(err)
					}
					pre = max(pre, prompt/time.Since(start).Seconds())
					start = time.Now()
					tok := argmax32(logits)
					for i := range decode {
						if err := m.Forward(context.Background(), pool, st, kv, []model.Seq{{Tokens: []int32{tok}, Pos: prompt + i, Blocks: blocks, Logits: logits}}); err != nil {
							t.Fatal(err)
						}
						tok = argmax32(logits)
					}
					dec = max(dec, decode/time.Since(start).Seconds())
					pool.Close()
				}
				r := runLlamaCpp(t, dir, llamaReq{Model: path, Threads: th, KV: llamaKV, Bench: map[string]int{"prompt": prompt, "decode": decode, "reps": reps}})
				lp, ld := r.Bench["prefill_tps"], r.Bench["decode_tps"]
				t.Logf("BENCH | %s | %s | kv %s | %d | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f | %s |", shape, qt, kvt, th, pre, lp, pre/lp, dec, ld, dec/ld, r.CPU)
			}
		}
	}
}
