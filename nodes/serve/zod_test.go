package serve

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/internal/sharedfiles"
	"github.com/tandemllm/tandem/tokenizer"
)

// nodeModules is the official npm clients' node_modules
// (scripts/install-node-clients.sh): $TANDEM_NODE_CLIENTS, else the
// newest in ~/.cache/tandem; "" when absent.
func nodeModules() string {
	if d := os.Getenv("TANDEM_NODE_CLIENTS"); d != "" {
		return filepath.Join(d, "node_modules")
	}
	dirs, _ := filepath.Glob(filepath.Join(sharedfiles.CacheDir(), "node-clients-*", "node_modules"))
	if len(dirs) == 0 {
		return ""
	}
	return dirs[len(dirs)-1]
}

// TestZodResponseFormat: the openai npm client's zodResponseFormat with
// chat.completions.parse returns a parsed object through tandem serve (the
// mocker, masked by the schema zod writes).
func TestZodResponseFormat(t *testing.T) {
	nm := nodeModules()
	node, err := exec.LookPath("node")
	if err != nil || nm == "" {
		t.Skip("node or the npm clients (scripts/install-node-clients.sh) absent")
	}
	if _, err := os.Stat(filepath.Join(nm, "openai", "helpers", "zod.mjs")); err != nil {
		t.Skip("openai npm client without helpers/zod")
	}
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	vocab := structuredVocab(t, model.Tokenizer)
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.Workers = "127.0.0.1:0", 1
	sys, err := Start(cfg, model, func(int) (engine.Engine, error) {
		c := mockerConfig(model)
		c.Instant, c.TokenBytes = true, vocab
		return mocker.New(c)
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Shutdown(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "testdata/zod_parse.mjs")
	cmd.Env = append(os.Environ(), "NM="+nm, "BASE="+sys.URL(), "MODEL="+model.Name)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS zod_parse") {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("%s", out)
}
