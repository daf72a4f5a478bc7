package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
)

const (
	key1 = "tk-0123456789abcdef-one"
	key2 = "tk-0123456789abcdef-two"
)

func TestAPIKeys(t *testing.T) {
	keys, err := ParseAPIKeys([]byte("# clients\n" + key1 + "\n\n  " + key2 + "  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if keys.Len() != 2 || !keys.Valid(key1) || !keys.Valid(key2) || keys.Valid(key1[:len(key1)-1]) || keys.Valid("") {
		t.Fatal("key set is wrong")
	}
	for _, tc := range []struct {
		name, file string
		protect    bool
	}{{"metrics open", "", false}, {"metrics protected", "", true}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.APIKeys, cfg.ProtectMetrics = keys, tc.protect
			eng := &enginetest.Scripted{Name: "m", Output: toks("hi"), EOS: []engine.Token{tokEnd}}
			f := newFixtureCfg(t, cfg, 4096, map[string]engine.Generator{"w0": eng})
			chat := `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":2}`
			for _, r := range []struct {
				method, path, auth string
				want               int
			}{
				{"POST", "/v1/chat/completions", "", 401},
				{"POST", "/v1/chat/completions", "Bearer wrong-key-0123456789", 401},
				{"POST", "/v1/chat/completions", "Basic " + key1, 401},
				{"POST", "/v1/chat/completions", "Bearer " + key1, 200},
				{"POST", "/v1/chat/completions", "Bearer " + key2, 200},
				{"POST", "/v1/completions", "", 401},
				{"GET", "/v1/models", "", 401},
				{"GET", "/v1/models", "Bearer " + key2, 200},
				{"GET", "/v1/nothing", "", 401},
				{"GET", "/health", "", 200},
				{"GET", "/live", "", 200},
				{"GET", "/metrics", "", map[bool]int{false: 200, true: 401}[tc.protect]},
				{"GET", "/metrics", "Bearer " + key1, 200},
			} {
				req, _ := http.NewRequest(r.method, f.url+r.path, strings.NewReader(chat))
				if r.auth != "" {
					req.Header.Set("Authorization", r.auth)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != r.want {
					t.Fatalf("%s %s auth %q: %d %s, want %d", r.method, r.path, r.auth, resp.StatusCode, body, r.want)
				}
				if r.want != 401 {
					continue
				}
				var e struct {
					Error struct {
						Message, Type string
						Code          *string
					}
				}
				if err := json.Unmarshal(body, &e); err != nil || e.Error.Type != "invalid_request_error" || e.Error.Code == nil || *e.Error.Code != "invalid_api_key" {
					t.Fatalf("401 body %s is not OpenAI's shape", body)
				}
				if resp.Header.Get("WWW-Authenticate") == "" {
					t.Fatal("401 without WWW-Authenticate")
				}
			}
		})
	}
}

func TestLoadAPIKeysErrors(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"empty":  "# nothing\n\n",
		"short":  "abc\n",
		"spaces": "0123456789abcdef 0123\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadAPIKeys(p); err == nil {
			t.Fatalf("%s: loaded", name)
		}
	}
	if _, err := LoadAPIKeys(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file loaded")
	}
}

func FuzzParseAPIKeys(f *testing.F) {
	f.Add([]byte("# keys\n" + key1 + "\n" + key2 + "\n"))
	f.Add([]byte("short\n"))
	f.Add([]byte("\n\n#\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParseAPIKeys(b)
		if err != nil {
			return
		}
		if k.Len() == 0 {
			t.Fatal("a key set with no key")
		}
		// Every accepted line is a valid key.
		for _, line := range strings.Split(string(b), "\n") {
			if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "#") && !k.Valid(s) {
				t.Fatalf("line %q accepted but not valid", s)
			}
		}
	})
}
