package sharedfiles

import (
	"fmt"
	"os"
	"path/filepath"
)

// CacheDir is Tandem's cache of fetched and built files: $TANDEM_CACHE,
// else ~/.cache/tandem (where scripts/fetch-qwen3-tokenizer.sh and .ci/run
// put them).
func CacheDir() string {
	if c := os.Getenv("TANDEM_CACHE"); c != "" {
		return c
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".cache", "tandem")
	}
	return filepath.Join(home, ".cache", "tandem")
}

// Qwen3Tokenizer is the directory of the Qwen3 Hugging Face tokenizer
// (tokenizer.json and tokenizer_config.json) in CacheDir, or an error
// saying how to fetch it when it is not there: the tests that need a real
// 151k-token vocabulary skip with it.
func Qwen3Tokenizer() (string, error) {
	dir := filepath.Join(CacheDir(), "tokenizers", "qwen3")
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("Qwen3 tokenizer not cached in %s (scripts/fetch-qwen3-tokenizer.sh fetches it): %w", dir, err)
		}
	}
	return dir, nil
}
