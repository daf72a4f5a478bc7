package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestModelGenTokenizerMissing: a --tokenizer that does not exist names
// the script that fetches the quick start's tokenizer.
func TestModelGenTokenizerMissing(t *testing.T) {
	cmd := newRootCmd()
	cmd.SetOut(io.Discard)
	cmd.SetArgs([]string{"model", "gen", "--shape", "tiny", "--tokenizer", filepath.Join(t.TempDir(), "qwen3"), "--out", filepath.Join(t.TempDir(), "x.gguf")})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "scripts/fetch-qwen3-tokenizer.sh") {
		t.Fatalf("err = %v", err)
	}
}
