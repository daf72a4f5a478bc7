package model

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/internal/sharedfiles"
)

// refPath finds a file of the shared stories260K model or skips the test.
func refPath(t testing.TB, name string) string {
	t.Helper()
	p, err := sharedfiles.Path("models", "stories260K", name)
	if err != nil {
		t.Skipf("shared directory absent: %v", err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("reference model absent: %v", err)
	}
	return p
}

// vocab is a minimal llama2.c tokenizer for tests, kept here so this
// package does not depend on the tokenizer package.
type vocab struct {
	pieces []string
	scores []float32
	ids    map[string]int32
}

func loadVocab(t testing.TB, path string, n int) *vocab {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(b)
	var maxLen int32
	binary.Read(r, binary.LittleEndian, &maxLen)
	v := &vocab{ids: map[string]int32{}}
	for i := range n {
		var score float32
		var l int32
		if err := binary.Read(r, binary.LittleEndian, &score); err != nil {
			t.Fatal(err)
		}
		binary.Read(r, binary.LittleEndian, &l)
		p := make([]byte, l)
		r.Read(p)
		v.pieces = append(v.pieces, string(p))
		v.scores = append(v.scores, score)
		v.ids[string(p)] = int32(i)
	}
	return v
}

// encode is llama2.c's encode with a dummy prefix and no BOS/EOS.
func (v *vocab) encode(text string) []int32 {
	var toks []int32
	text = " " + text
	for _, r := range text {
		s := string(r)
		if id, ok := v.ids[s]; ok {
			toks = append(toks, id)
			continue
		}
		for _, b := range []byte(s) {
			toks = append(toks, int32(b)+3)
		}
	}
	for {
		best, bestID, bestIdx := float32(-1e10), int32(-1), -1
		for i := 0; i+1 < len(toks); i++ {
			if id, ok := v.ids[v.pieces[toks[i]]+v.pieces[toks[i+1]]]; ok && v.scores[id] > best {
				best, bestID, bestIdx = v.scores[id], id, i
			}
		}
		if bestIdx < 0 {
			return toks
		}
		toks[bestIdx] = bestID
		toks = append(toks[:bestIdx+1], toks[bestIdx+2:]...)
	}
}

func (v *vocab) decode(prev, tok int32) string {
	p := v.pieces[tok]
	if prev == 1 && strings.HasPrefix(p, " ") {
		p = p[1:]
	}
	var b byte
	if n, _ := fmt.Sscanf(p, "<0x%02X>", &b); n == 1 && len(p) == 6 {
		return string([]byte{b})
	}
	return p
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

func maxAbsDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}
