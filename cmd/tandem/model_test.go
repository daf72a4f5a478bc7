package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/tandemllm/tandem/engine/native/model"
)

// TestModelGen writes deterministic random-weight models in both formats and
// loads them back.
func TestModelGen(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ out, dtype string }{
		{"tiny.bin", "f32"},
		{"tiny.gguf", "q8_0"},
	} {
		path := filepath.Join(dir, tc.out)
		for i := 0; i < 2; i++ { // the same seed twice: the same bytes
			cmd := newRootCmd()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetArgs([]string{"model", "gen", "--shape", "tiny", "--seed", "3", "--dtype", tc.dtype, "--out", path})
			if err := cmd.Execute(); err != nil {
				t.Fatalf("%s: %v", tc.out, err)
			}
		}
		load := model.LoadGGUF
		if filepath.Ext(path) == ".bin" {
			load = model.LoadLlama2C
		}
		if _, err := load(path); err != nil {
			t.Fatalf("%s does not load: %v", tc.out, err)
		}
	}
	cmd := newRootCmd()
	cmd.SetArgs([]string{"model", "gen", "--shape", "nope", "--out", filepath.Join(dir, "x.bin")})
	if err := cmd.Execute(); err == nil {
		t.Fatal("an unknown shape was accepted")
	}
}
