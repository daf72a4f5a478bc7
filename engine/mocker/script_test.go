package mocker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/tokenizer"
)

const testScript = `{"rules":[
 {"role":"tool","when":"sunny","reply":"It is sunny in Paris."},
 {"when":"weather","reply":"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"},
 {"when":"","reply":"Hello."}]}`

func renderPrompt(t *testing.T, m *tokenizer.Model, msgs string) []engine.Token {
	t.Helper()
	text, err := m.Template.Render(tokenizer.ChatInput{Messages: json.RawMessage(msgs), AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	return m.Tokenizer.Encode(text)
}

// TestScriptReplies: the rule matching the last user message (or, for a
// tool rule, what follows it) is written token for token, then EOS, and
// max_tokens cuts a long reply.
func TestScriptReplies(t *testing.T) {
	m, err := tokenizer.Load("")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(path, []byte(testScript), 0o600); err != nil {
		t.Fatal(err)
	}
	sc, err := LoadScript(path, m)
	if err != nil {
		t.Fatal(err)
	}
	if sc.userPrefix == "" || sc.genPrompt == "" {
		t.Fatalf("markers not learnt: prefix %q suffix %q gen %q", sc.userPrefix, sc.userSuffix, sc.genPrompt)
	}
	e := newTest(t, Config{Script: sc, EOS: m.Tokenizer.EOS(), Instant: true})
	cases := []struct {
		name, msgs string
		max        int
		want       string
		finish     engine.FinishReason
	}{
		{"tool call", `[{"role":"system","content":"weather is not asked here"},{"role":"user","content":"What is the weather in Paris?"}]`, 0,
			"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", engine.FinishStop},
		{"earlier user turn does not match", `[{"role":"user","content":"weather?"},{"role":"assistant","content":"sure"},{"role":"user","content":"thanks"}]`, 0,
			"Hello.", engine.FinishStop},
		{"tool result", `[{"role":"user","content":"What is the weather in Paris?"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"sunny, 21C"}]`, 0,
			"It is sunny in Paris.", engine.FinishStop},
		{"max_tokens", `[{"role":"user","content":"weather"}]`, 3, "", engine.FinishLength},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := renderPrompt(t, m, c.msgs)
			st, err := e.Generate(context.Background(), &engine.Request{Prompt: p, MaxTokens: c.max})
			if err != nil {
				t.Fatal(err)
			}
			r := collect(t, st)
			if r.finish != c.finish {
				t.Fatalf("finish %v, want %v", r.finish, c.finish)
			}
			if c.max > 0 {
				if len(r.tokens) != c.max {
					t.Fatalf("%d tokens, want %d", len(r.tokens), c.max)
				}
				return
			}
			if last := r.tokens[len(r.tokens)-1]; last != m.Tokenizer.EOS()[0] {
				t.Fatalf("last token %d, want EOS", last)
			}
			if got := m.Tokenizer.Decode(r.tokens[:len(r.tokens)-1]); got != c.want {
				t.Fatalf("reply %q, want %q", got, c.want)
			}
		})
	}
}

func TestScriptRefusesBadFiles(t *testing.T) {
	m, err := tokenizer.Load("")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`{}`, `{"rules":[]}`, `{"rules":[{"when":"a","reply":"b","role":"system"}]}`, `{"rules":[{"wen":"a"}]}`, `[`} {
		if _, err := ParseScript([]byte(bad), m); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	big := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(big, []byte(`{"rules":[{"reply":"`+strings.Repeat("a", MaxScriptBytes)+`"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadScript(big, m); err == nil || !strings.Contains(err.Error(), "larger") {
		t.Errorf("big file: %v", err)
	}
}
