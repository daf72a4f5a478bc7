package model

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine/native/kernels"
)

// greedy runs llama2.c's generate loop: steps positions including BOS, the
// prompt forced, then argmax. The prompt is fed one token at a time, as in
// run.c; the batched path is covered by the equality tests.
func greedy(t testing.TB, m *Model, pool *kernels.Pool, prompt []int32, steps int) []int32 {
	t.Helper()
	kv, err := NewKVStore(&m.Config, 16, (m.Config.SeqLen+15)/16)
	if err != nil {
		t.Fatal(err)
	}
	blocks := make([]int32, kv.NumBlocks)
	for i := range blocks {
		blocks[i] = int32(kv.NumBlocks - 1 - i) // non-identity table on purpose
	}
	st := &State{}
	logits := make([]float32, m.Config.Vocab)
	out := []int32{1}
	tok := int32(1)
	for pos := 0; pos < steps; pos++ {
		if err := m.Forward(context.Background(), pool, st, kv, []Seq{{Tokens: []int32{tok}, Pos: pos, Blocks: blocks, Logits: logits}}); err != nil {
			t.Fatal(err)
		}
		if pos < len(prompt) {
			tok = prompt[pos]
		} else {
			tok = argmax(logits)
		}
		if tok == 1 {
			break
		}
		out = append(out, tok)
	}
	return out
}

func TestGolden(t *testing.T) {
	m, err := LoadLlama2C(refPath(t, "stories260K.bin"))
	if err != nil {
		t.Fatal(err)
	}
	v := loadVocab(t, refPath(t, "tok512.bin"), m.Config.Vocab)
	if got := v.encode("Once upon a time"); !equal(got, []int32{403, 407, 261, 378}) {
		t.Fatalf("test encoder gives %v", got)
	}
	pool := kernels.NewPool(2)
	defer pool.Close()
	for _, tc := range []struct{ prompt, file string }{
		{"Once upon a time", "golden-once-upon-a-time.txt"},
		{"Lily and Tom went to the park", "golden-lily-and-tom.txt"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			want, err := os.ReadFile(refPath(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			toks := greedy(t, m, pool, v.encode(tc.prompt), 64)
			var sb strings.Builder
			for i := 1; i < len(toks); i++ {
				sb.WriteString(v.decode(toks[i-1], toks[i]))
			}
			sb.WriteString("\n") // run.c ends its output with a newline
			if sb.String() != string(want) {
				t.Fatalf("got\n%q\nwant\n%q", sb.String(), want)
			}
		})
	}
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
