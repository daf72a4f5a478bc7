package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/engine/upstream/standin"
	"github.com/tandemllm/tandem/internal/sharedfiles"
	"github.com/tandemllm/tandem/tokenizer"
)

// docsCommandLines returns the `tandem ...` command lines of a markdown
// file's code blocks, continuation lines joined.
func docsCommandLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	var cur strings.Builder
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			in = !in
			continue
		}
		if !in {
			continue
		}
		if cur.Len() == 0 && !strings.HasPrefix(line, "tandem ") {
			continue
		}
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(rest + " ")
			continue
		}
		cur.WriteString(line)
		out = append(out, strings.Join(strings.Fields(cur.String()), " "))
		cur.Reset()
	}
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestDocsEnginesCommandLines: every `tandem` command line of
// docs/engines.md starts as written and serves a completion, against
// stand-ins of the engines it names on loopback (their host names and
// ports replaced by the stand-ins', /models/Qwen3-0.6B by the Qwen3
// tokenizer, optional [--flag VALUE] groups left out). One of them
// (publishing into Tandem from other hosts) used to be refused.
func TestDocsEnginesCommandLines(t *testing.T) {
	skipShort(t)
	qwen, err := sharedfiles.Qwen3Tokenizer()
	if err != nil {
		t.Skip(err)
	}
	tm, err := tokenizer.Load(qwen)
	if err != nil {
		t.Fatal(err)
	}
	codec := tm.Tokenizer
	events := func(replay bool) mocker.Config {
		cfg := mocker.DefaultConfig()
		cfg.Instant = true
		cfg.BlockSize = 16
		cfg.KVEvents.Enabled = true
		cfg.KVEvents.Endpoint = "tcp://127.0.0.1:0"
		if replay {
			cfg.KVEvents.ReplayEndpoint = "tcp://127.0.0.1:0"
		}
		return cfg
	}
	subst := map[string]string{"/models/Qwen3-0.6B": qwen}
	for i := range 2 {
		v, err := standin.Start(standin.Options{Model: "Qwen/Qwen3-0.6B", ReturnTokenIDs: true, PromptTokensDetails: true, Codec: codec, Mocker: events(true)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { v.Close() })
		host := fmt.Sprintf("vllm-%d", i)
		subst["http://"+host+":8000"] = v.URL()
		subst["tcp://"+host+":5557"] = v.Engine().KVEventsEndpoint()
		subst["tcp://"+host+":5558"] = v.Engine().KVEventsReplayEndpoint()
	}
	sgCfg := events(true)
	sgCfg.KVEvents.Endpoint, sgCfg.KVEvents.ReplayEndpoint = "tcp://127.0.0.1:0", "tcp://127.0.0.1:0"
	sg, err := standin.StartSGLang(standin.SGLangOptions{Model: "Qwen/Qwen3-0.6B", Mocker: sgCfg, DPSize: 2, EnableMetrics: true, Codec: codec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sg.Close() })
	subst["http://sglang-0:30000"] = sg.URL()
	subst["tcp://sglang-0:5557"] = sg.Rank(0).KVEventsEndpoint()
	subst["tcp://sglang-0:5600"] = sg.Rank(0).KVEventsReplayEndpoint()
	plain := mocker.DefaultConfig()
	plain.Instant, plain.KVEvents.Enabled = true, false
	oa, err := standin.StartSGLang(standin.SGLangOptions{Model: "Qwen/Qwen3-0.6B", Mocker: plain, Codec: codec, EnableCacheReport: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { oa.Close() })
	subst["http://server-0:30000"] = oa.URL()
	lc, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "qwen3-0.6b-q8_0.gguf", Slots: 8, Metrics: true, Codec: codec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	subst["http://llama-0:8080"] = lc.URL()
	optional := regexp.MustCompile(`\s*\[[^\]]*\]`)
	lines := docsCommandLines(t, filepath.Join("..", "docs", "engines.md"))
	if len(lines) < 6 {
		t.Fatalf("%d tandem command lines in docs/engines.md", len(lines))
	}
	for _, line := range lines {
		t.Run(line, func(t *testing.T) {
			args := optional.ReplaceAllString(line, "")
			for k, v := range subst {
				args = strings.ReplaceAll(args, k, v)
			}
			args = strings.ReplaceAll(args, "tcp://0.0.0.0:5557", fmt.Sprintf("tcp://0.0.0.0:%d", freePort(t)))
			if strings.Contains(args, "-0:") || strings.Contains(args, "-1:") {
				t.Fatalf("a host of the docs is not stood in for: %s", args)
			}
			args = strings.TrimPrefix(args, "tandem ") + " --http-addr 127.0.0.1:0"
			p := startTandem(t, args)
			resp, err := http.Get(p.url + "/v1/models")
			if err != nil {
				t.Fatal(err)
			}
			var models struct {
				Data []struct {
					ID string `json:"id"`
				} `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&models)
			resp.Body.Close()
			if err != nil || len(models.Data) == 0 {
				t.Fatalf("/v1/models: %v %+v", err, models)
			}
			if p.model != models.Data[0].ID {
				t.Fatalf("the banner names model %q, /v1/models %q", p.model, models.Data[0].ID)
			}
			body := fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time","max_tokens":4}`, models.Data[0].ID)
			deadline := time.Now().Add(10 * time.Second)
			for {
				resp, err := http.Post(p.url+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("completion: %d %s", resp.StatusCode, b)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}
