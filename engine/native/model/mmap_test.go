package model

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/tandemllm/tandem/engine/native/gguf"
	"github.com/tandemllm/tandem/engine/native/kernels"
)

// rssBytes is the process's resident set (Linux /proc/self/statm).
func rssBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm: %v", err)
	}
	var size, res int64
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &size, &res); err != nil {
		t.Fatal(err)
	}
	return res * int64(os.Getpagesize())
}

// TestLoadMapsWithoutTouching writes a Qwen3-0.6B-shaped Q4_K_M file (the
// tensor bytes are zero blocks: valid, and cheap to write) and loads it:
// the resident set grows by the norms and RoPE tables only, not by the
// ~400 MB of weights, which stay in the page cache until a product reads
// them. The same for a Q8_0 file (640 MB, kept as kernels.Q8_0 blocks)
// and for an F16 file (1.2 GB) where the kernels keep F16 matrices as
// halves (kernels.NativeF16). The load time is logged, not asserted (a
// loaded machine varies).
func TestLoadMapsWithoutTouching(t *testing.T) {
	eachMappedQuant(t, []string{"q4_k_m", "q8_0", "f16"}, testLoadMapsWithoutTouching)
}

// eachMappedQuant runs fn as a subtest per file type whose matrices are
// read in place from the file's mapping: none where files are read, not
// F16 where the kernels widen it at load.
func eachMappedQuant(t *testing.T, quants []string, fn func(t *testing.T, quant string)) {
	if !gguf.Mapped() {
		t.Skip("this platform reads files instead of mapping them")
	}
	for _, quant := range quants {
		t.Run(quant, func(t *testing.T) {
			if quant == "f16" && !kernels.NativeF16() {
				t.Skip("F16 matrices are widened at load at this kernel level")
			}
			fn(t, quant)
		})
	}
}

func testLoadMapsWithoutTouching(t *testing.T, quant string) {
	c, err := Shape("0.6b")
	if err != nil {
		t.Fatal(err)
	}
	q, err := ParseQuant(quant)
	if err != nil {
		t.Fatal(err)
	}
	var w gguf.Writer
	a := c.Arch
	w.Set("general.architecture", a)
	for k, v := range map[string]uint32{"context_length": uint32(c.SeqLen), "embedding_length": uint32(c.Dim), "feed_forward_length": uint32(c.Hidden),
		"block_count": uint32(c.Layers), "attention.head_count": uint32(c.Heads), "attention.head_count_kv": uint32(c.KVHeads), "attention.key_length": uint32(c.HeadDim)} {
		w.Set(a+"."+k, v)
	}
	w.Set(a+".rope.freq_base", float32(c.RopeTheta))
	var total int64
	add := func(name string, rows, cols int) {
		typ := gguf.F32
		dims := []uint64{uint64(cols)}
		if rows > 0 {
			typ, dims = q.TypeFor(name, c.Layers, false, cols), []uint64{uint64(cols), uint64(rows)}
		}
		n, err := typ.RowBytes(cols)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, n*max(rows, 1))
		if rows == 0 { // norms of ones
			for i := 0; i < len(data); i += 4 {
				data[i+2], data[i+3] = 0x80, 0x3f
			}
		}
		total += int64(len(data))
		w.AddTensor(name, typ, dims, data)
	}
	add("token_embd.weight", c.Vocab, c.Dim)
	add("output_norm.weight", 0, c.Dim)
	for i := range c.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		add(p+"attn_norm.weight", 0, c.Dim)
		add(p+"attn_q.weight", c.QDim(), c.Dim)
		add(p+"attn_k.weight", c.KVDim(), c.Dim)
		add(p+"attn_v.weight", c.KVDim(), c.Dim)
		add(p+"attn_output.weight", c.Dim, c.QDim())
		add(p+"ffn_norm.weight", 0, c.Dim)
		add(p+"ffn_gate.weight", c.Hidden, c.Dim)
		add(p+"ffn_down.weight", c.Dim, c.Hidden)
		add(p+"ffn_up.weight", c.Hidden, c.Dim)
		add(p+"attn_q_norm.weight", 0, c.HeadDim)
		add(p+"attn_k_norm.weight", 0, c.HeadDim)
	}
	path := filepath.Join(t.TempDir(), "qwen3-0.6b-"+quant+".gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriter(f)
	if _, err := w.WriteTo(bw); err != nil {
		t.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	w = gguf.Writer{}
	runtime.GC()
	before := rssBytes(t)
	start := time.Now()
	m, err := LoadGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	grew := rssBytes(t) - before
	t.Logf("loaded %d MB of weights in %v; resident set grew %d MB", total>>20, took, grew>>20)
	if grew > 48<<20 {
		t.Errorf("loading grew the resident set by %d MB for %d MB of weights: tensors were copied or touched", grew>>20, total>>20)
	}
	runtime.KeepAlive(m)
}

// TestCopyOutOfMapping: --no-mmap's copy leaves no matrix on the file's
// mapping (Mapped false, nothing counted as mapped, no matrix's bytes
// inside the file's) and the logits bit-identical, for Q8_0, a k-quant
// mix and F16 files.
func TestCopyOutOfMapping(t *testing.T) {
	eachMappedQuant(t, []string{"q8_0", "q4_k_m", "f16"}, func(t *testing.T, quant string) {
		path := writeQuantFile(t, quant)
		mapped, err := LoadGGUF(path)
		if err != nil {
			t.Fatal(err)
		}
		if !mapped.Mapped || mapped.MappedWeightBytes() == 0 {
			t.Fatalf("%s: nothing read in place before the copy", quant)
		}
		toks := []int32{1, 5, 9, 13, 2, 7}
		want := logitsOf(t, mapped, toks)
		copied, err := LoadGGUF(path)
		if err != nil {
			t.Fatal(err)
		}
		inPlace := map[*kernels.Mat][2]uintptr{}
		for _, w := range copied.mats() {
			if w.B != nil || w.H != nil {
				inPlace[w] = matSpan(w)
			}
		}
		// The file's mapping spans at least from the first matrix read
		// in place to the last.
		file := [2]uintptr{^uintptr(0), 0}
		for _, sp := range inPlace {
			file = [2]uintptr{min(file[0], sp[0]), max(file[1], sp[1])}
		}
		copied.CopyOutOfMapping()
		if copied.Mapped || copied.MappedWeightBytes() != 0 {
			t.Fatalf("after the copy: Mapped %v, %d bytes mapped", copied.Mapped, copied.MappedWeightBytes())
		}
		for w := range inPlace {
			if now := matSpan(w); now[0] < file[1] && now[1] > file[0] {
				t.Fatalf("a %v matrix still reads the file's mapping", w.Type)
			}
		}
		if got := logitsOf(t, copied, toks); !slices.Equal(got, want) {
			t.Fatalf("logits differ after the copy: max |Δ| %g", maxAbsDiff(got, want))
		}
	})
}

// TestQuantizeMapped: quantizing a model read in place (F16 halves on the
// file's mapping, or an F32 file whose values were copied at load) leaves
// nothing counted as mapped, and the logits are those of the same file
// quantized after a plain copy.
func TestQuantizeMapped(t *testing.T) {
	if !gguf.Mapped() {
		t.Skip("this platform reads files instead of mapping them")
	}
	for _, quant := range []string{"f32", "f16"} {
		t.Run(quant, func(t *testing.T) {
			path := writeQuantFile(t, quant)
			load := func(copyOut bool) *Model {
				m, err := LoadGGUF(path)
				if err != nil {
					t.Fatal(err)
				}
				if copyOut {
					m.CopyOutOfMapping()
				}
				if err := m.Quantize(); err != nil {
					t.Fatal(err)
				}
				if m.Mapped || m.MappedWeightBytes() != 0 {
					t.Fatalf("after Quantize: Mapped %v, %d bytes mapped", m.Mapped, m.MappedWeightBytes())
				}
				for _, w := range m.mats() {
					if w.Type != kernels.Q8_0 {
						t.Fatalf("a %v matrix after Quantize", w.Type)
					}
				}
				return m
			}
			toks := []int32{1, 5, 9, 13, 2, 7}
			want := logitsOf(t, load(true), toks)
			if got := logitsOf(t, load(false), toks); !slices.Equal(got, want) {
				t.Fatalf("logits differ: max |Δ| %g", maxAbsDiff(got, want))
			}
		})
	}
}

// writeQuantFile writes a small two-layer Qwen3 model as a GGUF file of
// the named type (ParseQuant's names) and returns its path.
func writeQuantFile(t *testing.T, quant string) string {
	t.Helper()
	q, err := ParseQuant(quant)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteGGUFQuant(&buf, kquantModel(t, "qwen3", 2), q); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// matSpan is the address range of a block or F16 matrix's bytes.
func matSpan(w *kernels.Mat) [2]uintptr {
	if w.B != nil {
		return span(w.B)
	}
	return span(halfBytes(w.H))
}

func span(b []byte) [2]uintptr {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return [2]uintptr{p, p + uintptr(len(b))}
}
