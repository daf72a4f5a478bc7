//go:build rss

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine/native"
	"github.com/tandemllm/tandem/internal/sharedfiles"
)

// TestNativeQ8RSS (go test -tags rss -run TestNativeQ8RSS ./e2e): `tandem
// serve --engine native` on a small Q8_0 GGUF (the 15m shape with the
// Qwen3 tokenizer, 56 MiB), with one worker and with two, once healthy:
// the resident set is at most 15% above the file plus the KV caches the
// workers allocated (issue 38's bound, here on a small file whose fixed
// costs weigh more), and the second worker adds no second copy of the
// weights (/health says they are shared by both). Figures are logged.
func TestNativeQ8RSS(t *testing.T) {
	qwen3, err := sharedfiles.Qwen3Tokenizer()
	if err != nil {
		t.Skip(err)
	}
	path := filepath.Join(t.TempDir(), "15m-q8_0.gguf")
	if err := native.GenerateModel(path, native.GenOptions{Shape: "15m", Seed: 1, DType: "q8_0", Tokenizer: qwen3}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	file := st.Size()
	var rss1, weights int64
	for _, workers := range []int{1, 2} {
		p := startProc(t, fmt.Sprintf("serve-%d", workers), fmt.Sprintf("serve --engine native --threads 1 --kv-events off --http-addr 127.0.0.1:0 --workers %d --model %s", workers, path), frontendReady)
		url := p.line // the banner's URL, without /v1
		h := waitNativeHealth(t, url, workers)
		rss := procRSS(p.cmd.Process.Pid)
		var kv int64
		for _, w := range h.Workers {
			kv += w.Memory.KVBytes
			if w.Memory.SharedBy != workers {
				t.Errorf("%d workers: /health says the weights are shared by %d", workers, w.Memory.SharedBy)
			}
			weights = w.Memory.Weights
		}
		bound := (file + kv) * 115 / 100
		t.Logf("%d worker(s): RSS %.1f MiB; file %.1f MiB + KV allocated %.1f MiB = %.1f MiB (RSS/(file+KV) %.2f, RSS/file %.2f); weights in memory %.1f MiB",
			workers, mib(rss), mib(file), mib(kv), mib(file+kv), float64(rss)/float64(file+kv), float64(rss)/float64(file), mib(weights))
		if rss > bound {
			t.Errorf("%d worker(s): RSS %.1f MiB is more than 15%% above the file and its KV caches (%.1f MiB)", workers, mib(rss), mib(bound))
		}
		if workers == 1 {
			rss1 = rss
		} else if rss-rss1 > weights/2 {
			t.Errorf("the second worker added %.1f MiB of RSS for %.1f MiB of weights: were they loaded twice?", mib(rss-rss1), mib(weights))
		}
		p.cmd.Process.Kill()
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

type nativeHealth struct {
	Workers []struct {
		Memory struct {
			Weights  int64 `json:"weights_bytes"`
			SharedBy int   `json:"weights_shared_by"`
			KVBytes  int64 `json:"kv_bytes"`
		} `json:"memory"`
	} `json:"workers"`
}

// waitNativeHealth polls /health until it is 200 with workers workers.
func waitNativeHealth(t *testing.T, url string, workers int) nativeHealth {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := c.Get(url + "/health")
		if err == nil {
			var h nativeHealth
			err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&h)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK && len(h.Workers) == workers {
				return h
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s/health not healthy with %d workers within 60 s", url, workers)
	return nativeHealth{}
}
