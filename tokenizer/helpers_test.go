package tokenizer

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tandemllm/tandem/internal/sharedfiles"
)

// Construction is the slow part of these tests (Qwen3's tokenizer.json
// most of all, several times slower under -race), so each model
// is built once per test binary and shared; the types are immutable.
var (
	defaultOnce  sync.Once
	defaultModel *Model
	defaultErr   error

	qwenOnce  sync.Once
	qwenModel *Model
	qwenErr   error
	qwenDir   string
)

func testDefault(tb testing.TB) *Model {
	tb.Helper()
	defaultOnce.Do(func() { defaultModel, defaultErr = Default() })
	if defaultErr != nil {
		tb.Fatalf("Default: %v", defaultErr)
	}
	return defaultModel
}

// qwen3CacheDir is where scripts/fetch-qwen3-tokenizer.sh puts the files.
func qwen3CacheDir() string {
	return filepath.Join(sharedfiles.CacheDir(), "tokenizers", "qwen3")
}

// testQwen3 loads the cached Qwen3 tokenizer or skips the test.
func testQwen3(tb testing.TB) *Model {
	tb.Helper()
	qwenOnce.Do(func() {
		qwenDir = qwen3CacheDir()
		if _, err := os.Stat(filepath.Join(qwenDir, "tokenizer.json")); err != nil {
			qwenErr = err
			return
		}
		qwenModel, qwenErr = LoadDir(qwenDir)
	})
	if qwenModel == nil {
		if _, err := os.Stat(filepath.Join(qwenDir, "tokenizer.json")); err != nil {
			tb.Skipf("Qwen3 tokenizer not cached in %s; run scripts/fetch-qwen3-tokenizer.sh", qwenDir)
		}
		tb.Fatalf("LoadDir(%s): %v", qwenDir, qwenErr)
	}
	return qwenModel
}

func qwenAvailable() (string, error) {
	d := qwen3CacheDir()
	_, err := os.Stat(filepath.Join(d, "tokenizer.json"))
	return d, err
}

func storiesPath() (string, error) {
	p, err := sharedfiles.Path("models", "stories260K", "tok512.bin")
	if err != nil {
		return "", err
	}
	_, err = os.Stat(p)
	return p, err
}

// storiesDir returns the shared stories260K directory or skips the test.
func storiesDir(tb testing.TB) string {
	tb.Helper()
	p, err := storiesPath()
	if err != nil {
		tb.Skipf("stories260K not available (shared directory): %v", err)
	}
	return filepath.Dir(p)
}

func testStories(tb testing.TB) Tokenizer {
	tb.Helper()
	tok, err := LoadLlama2C(filepath.Join(storiesDir(tb), "tok512.bin"))
	if err != nil {
		tb.Fatalf("LoadLlama2C: %v", err)
	}
	return tok
}
