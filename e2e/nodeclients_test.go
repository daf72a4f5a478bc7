package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/internal/sharedfiles"
)

// The official API clients, unmodified, against `tandem serve` with a
// mocker whose reply script (--mocker-script) makes it write a greeting,
// a greeting after a <think> block, a Hermes-style tool call, or an
// answer from a tool's result. Each
// client's script (testdata/nodeclients) prints "PASS name" per check;
// each check is a subtest here. The clients are installed by
// scripts/install-node-clients.sh (CI runs it); without node or them the
// test skips, and a check whose server feature is missing (tool-call
// parsing, logprobs) skips naming it.

// nodeCheck is one check of a client script and the server feature it
// needs ("" for none).
type nodeCheck struct{ name, feature string }

var nodeClients = []struct {
	script string
	checks []nodeCheck
}{
	{"openai.mjs", []nodeCheck{{"chat", ""}, {"chat_stream", ""}, {"responses_create", ""}, {"responses_stream", ""},
		{"chat_tools", "tools"}, {"chat_tools_stream", "tools"}, {"responses_tools", "tools"}, {"responses_reasoning", "reasoning"},
		{"chat_logprobs", "logprobs"}}},
	{"anthropic.mjs", []nodeCheck{{"messages", ""}, {"messages_stream", ""}, {"messages_tools", "tools"}, {"messages_thinking", "reasoning"}}},
	{"aisdk.mjs", []nodeCheck{{"generate_text", ""}, {"stream_text", ""}, {"tool_loop", "tools"}}},
}

// missingFeature says what a server without a feature lacks.
var missingFeature = map[string]string{
	"tools":     "chat tool-call parsing (tool_calls from a Hermes <tool_call> reply with --tool-call-parser hermes) is not in this build",
	"logprobs":  "chat logprobs (logprobs, top_logprobs) are not in this build",
	"reasoning": "chat reasoning parsing (reasoning_content from a <think> reply with --reasoning-parser qwen3) is not in this build",
}

// mockerScript is the reply script: the tool-result rule first, so that
// the loop ends once the tool has answered.
const mockerScript = `{"rules":[
 {"role":"tool","when":"sunny","reply":"It is sunny in Paris."},
 {"when":"Think first","reply":"<think>Paris is in France.</think>Hello from Tandem."},
 {"when":"What is the weather in Paris?","reply":"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"},
 {"when":"","reply":"Hello from Tandem."}
]}`

// nodeClientsDir is where scripts/install-node-clients.sh put the
// clients: $TANDEM_NODE_CLIENTS, else the cache directory named after the
// hash of the script's package list (computed as the script does).
func nodeClientsDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("TANDEM_NODE_CLIENTS"); d != "" {
		return d
	}
	src, err := os.ReadFile("../scripts/install-node-clients.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)PACKAGES=\((.*?)\)`).FindSubmatch(src)
	if m == nil {
		t.Fatal("install-node-clients.sh: no PACKAGES list")
	}
	var list bytes.Buffer
	for _, p := range regexp.MustCompile(`"([^"]+)"`).FindAllSubmatch(m[1], -1) {
		list.Write(p[1])
		list.WriteByte('\n')
	}
	sum := sha256.Sum256(list.Bytes())
	return filepath.Join(sharedfiles.CacheDir(), "node-clients-"+hex.EncodeToString(sum[:])[:12])
}

// probeFeature asks the server whether a feature works.
func probeFeature(t *testing.T, url, apiKey, body string, ok func(map[string]any) bool) bool {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+apiKey)
	c := http.Client{Timeout: 30 * time.Second}
	if secure.on {
		c.Transport = &http.Transport{TLSClientConfig: secure.trust}
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var v map[string]any
	if resp.StatusCode != 200 || json.Unmarshal(b, &v) != nil {
		return false
	}
	return ok(v)
}

func choice0(v map[string]any) map[string]any {
	cs, _ := v["choices"].([]any)
	if len(cs) == 0 {
		return nil
	}
	c, _ := cs[0].(map[string]any)
	return c
}

func TestNodeClients(t *testing.T) {
	longParallel(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	dir := nodeClientsDir(t)
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		t.Skipf("the official npm clients are not installed in %s: run scripts/install-node-clients.sh", dir)
	}
	help, err := runCLI(t, "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	hasFlag := func(name string) bool { return strings.Contains(help, "--"+name+" ") }
	if !hasFlag("mocker-script") {
		t.Skip("tandem serve has no --mocker-script: the mocker reply script is not in this build")
	}
	tmp := t.TempDir()
	script := filepath.Join(tmp, "script.json")
	if err := os.WriteFile(script, []byte(mockerScript), 0o600); err != nil {
		t.Fatal(err)
	}
	args := "serve --http-addr 127.0.0.1:0 --workers 1 --mocker-script " + script
	if hasFlag("tool-call-parser") {
		args += " --tool-call-parser hermes"
	}
	if hasFlag("reasoning-parser") {
		args += " --reasoning-parser qwen3"
	}
	p := startTandem(t, args)
	model := "tandem-mock"
	apiKey := "unused"
	if secure.on {
		apiKey = testAPIKey
	}

	features := []string{}
	if probeFeature(t, p.url, apiKey, `{"model":"`+model+`","max_tokens":128,"messages":[{"role":"user","content":"What is the weather in Paris?"}],`+
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}`, func(v map[string]any) bool {
		c := choice0(v)
		m, _ := c["message"].(map[string]any)
		calls, _ := m["tool_calls"].([]any)
		return c["finish_reason"] == "tool_calls" && len(calls) == 1
	}) {
		features = append(features, "tools")
	}
	if probeFeature(t, p.url, apiKey, `{"model":"`+model+`","max_tokens":8,"logprobs":true,"top_logprobs":2,"messages":[{"role":"user","content":"hi"}]}`,
		func(v map[string]any) bool {
			lp, _ := choice0(v)["logprobs"].(map[string]any)
			content, _ := lp["content"].([]any)
			return len(content) > 0
		}) {
		features = append(features, "logprobs")
	}
	if probeFeature(t, p.url, apiKey, `{"model":"`+model+`","max_tokens":64,"messages":[{"role":"user","content":"Think first, then greet"}]}`,
		func(v map[string]any) bool {
			m, _ := choice0(v)["message"].(map[string]any)
			return m["reasoning_content"] == "Paris is in France."
		}) {
		features = append(features, "reasoning")
	}
	have := map[string]bool{}
	for _, f := range features {
		have[f] = true
	}

	// The scripts run from a directory whose node_modules is the
	// installed clients', so their imports resolve there.
	run := filepath.Join(tmp, "run")
	if err := os.MkdirAll(run, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(run, "node_modules")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "package.json"), []byte(`{"type":"module"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"common.mjs", "openai.mjs", "anthropic.mjs", "aisdk.mjs"} {
		b, err := os.ReadFile(filepath.Join("testdata", "nodeclients", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(run, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range nodeClients {
		t.Run(strings.TrimSuffix(c.script, ".mjs"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, c.script)
			cmd.Dir = run
			cmd.Env = append(os.Environ(), "TANDEM_URL="+p.url, "TANDEM_MODEL="+model, "TANDEM_API_KEY="+apiKey,
				"TANDEM_FEATURES="+strings.Join(features, ","))
			if secure.on {
				cmd.Env = append(cmd.Env, "NODE_EXTRA_CA_CERTS="+filepath.Join(secure.dir, "ca.crt"))
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, runErr := cmd.Output()
			passed := map[string]bool{}
			var failed string
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				line := sc.Text()
				if name, ok := strings.CutPrefix(line, "PASS "); ok {
					passed[name] = true
				} else if strings.HasPrefix(line, "FAIL ") {
					failed = line
				}
			}
			for _, ch := range c.checks {
				t.Run(ch.name, func(t *testing.T) {
					switch {
					case passed[ch.name]:
					case ch.feature != "" && !have[ch.feature]:
						t.Skip(missingFeature[ch.feature])
					case failed != "":
						t.Fatalf("%s\nstderr: %s", failed, stderr.String())
					default:
						t.Fatalf("not run (node: %v)\nstdout: %s\nstderr: %s", runErr, out, stderr.String())
					}
				})
			}
			if runErr != nil && failed == "" {
				t.Fatalf("node %s: %v\n%s", c.script, runErr, stderr.String())
			}
		})
	}
}
