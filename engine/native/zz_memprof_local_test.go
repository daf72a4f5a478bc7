//go:build memprof

package native

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine/native/gguf"
	"github.com/tandemllm/tandem/engine/native/model"
	"github.com/tandemllm/tandem/structured"
)

func cpuNow() (time.Duration, time.Duration) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

func TestMemProfLocal(t *testing.T) {
	path := os.Getenv("MEMPROF_MODEL")
	step := func(name string, f func()) {
		u0, s0 := cpuNow()
		w := time.Now()
		f()
		u1, s1 := cpuNow()
		t.Logf("%-12s wall %v user %v sys %v", name, time.Since(w).Round(time.Millisecond), (u1 - u0).Round(time.Millisecond), (s1 - s0).Round(time.Millisecond))
	}
	var f *gguf.File
	step("open", func() { f, _ = gguf.Open(path) })
	var m *model.Model
	step("fromgguf", func() {
		var err error
		if m, err = model.FromGGUF(f); err != nil {
			t.Fatal(err)
		}
	})
	var l *Loaded
	step("loadmodel", func() { l, _ = LoadModel(path) })
	var v *structured.Vocab
	step("vocab", func() {
		tm, _ := ServedModelLoaded(l, "")
		v, _ = structured.TokenizerVocab(tm.Tokenizer)
	})
	step("new", func() {
		e, _ := New(l.Model, Options{Vocab: v})
		e.Close()
	})
	_ = m
}
