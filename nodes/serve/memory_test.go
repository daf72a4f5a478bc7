package serve

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/native"
	nativemodel "github.com/tandemllm/tandem/engine/native/model"
	"github.com/tandemllm/tandem/tokenizer"
)

// TestNativeMemoryOnHealth: two native workers on one loaded Q8_0 GGUF
// show their memory on /health: the same weights, shared by both (so
// counted once), and each its own KV pool with how it was sized.
func TestNativeMemoryOnHealth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny-q8.gguf")
	if err := native.GenerateModelFile(path, "tiny-qwen3", 1, "q8_0"); err != nil {
		t.Fatal(err)
	}
	nm, err := nativemodel.LoadGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Workers = 2
	sys := startTest(t, cfg, func(*tokenizer.Model) EngineFactory {
		return func(int) (engine.Engine, error) {
			return native.New(nm, native.Options{Threads: 1, Workers: 2, KVBytes: 8 << 20})
		}
	})
	resp, err := http.Get(sys.URL() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		Workers []struct {
			ID     string `json:"id"`
			Memory *struct {
				Weights  int64  `json:"weights_bytes"`
				SharedBy int    `json:"weights_shared_by"`
				Mapped   *int64 `json:"weights_mapped_bytes"`
				KV       int64  `json:"kv_bytes"`
				Tokens   int    `json:"kv_tokens"`
				SizedBy  string `json:"kv_sized_by"`
			} `json:"memory"`
		} `json:"workers"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&h); err != nil {
		t.Fatal(err)
	}
	if len(h.Workers) != 2 {
		t.Fatalf("/health lists %d workers, want 2", len(h.Workers))
	}
	want := nm.WeightBytes()
	// Every matrix of a Q8_0 file is read in place where the file is
	// mapped (Linux); where it is read into memory, none is.
	wantMapped := int64(0)
	if nm.Mapped {
		wantMapped = want
	}
	for _, w := range h.Workers {
		m := w.Memory
		if m == nil {
			t.Fatalf("worker %s has no memory on /health", w.ID)
		}
		if m.Weights != want || m.SharedBy != 2 || m.Mapped == nil || *m.Mapped != wantMapped {
			t.Errorf("worker %s: weights %d shared by %d, mapped %v; want %d shared by 2, %d mapped (the file's Q8_0 blocks read in place)", w.ID, m.Weights, m.SharedBy, m.Mapped, want, wantMapped)
		}
		if m.KV < 8<<20 || m.Tokens < nm.Config.SeqLen || m.SizedBy == "" {
			t.Errorf("worker %s: KV %d bytes for %d tokens (%q); want at least 8 MiB and one full context of %d, with how it was sized",
				w.ID, m.KV, m.Tokens, m.SizedBy, nm.Config.SeqLen)
		}
	}
}
