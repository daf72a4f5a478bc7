package mocker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/tokenizer"
)

// MaxScriptBytes bounds a --mocker-script file.
const MaxScriptBytes = 1 << 20

// Script is a reply script (--mocker-script FILE): it makes a mocker answer
// chosen prompts with exact text, so the layers above can be tested with a
// random engine that still writes a tool call or a reasoning block. The file
// is JSON:
//
//	{"rules": [{"when": "weather", "reply": "<tool_call>\n{...}\n</tool_call>"}]}
//
// The first rule whose `when` occurs in the last user message wins (an empty
// `when` matches every prompt). A rule may also say `"role": "tool"`: it then
// matches only when something follows the last user message (the assistant's
// tool call and the tool's result, in an agent's second step), and `when` is
// looked for in that text; list such rules first so a tool loop ends. The
// mocker emits the reply's tokens, then EOS (honouring max_tokens); a prompt
// no rule matches gets the ordinary generated text.
//
// The engine sees token ids only, so the script decodes the prompt and finds
// the last user message with markers learnt by rendering probe conversations
// through the model's chat template (the text around a user message, an
// assistant message and the generation prompt).
type Script struct {
	rules []scriptRule
	tok   tokenizer.Tokenizer
	// The chat template's user-message prefix and suffix and its
	// generation prompt; empty when the template gave none (the whole
	// prompt is then the last user message).
	userPrefix, userSuffix, genPrompt string
}

type scriptRule struct {
	When  string `json:"when"`
	Role  string `json:"role"`
	Reply string `json:"reply"`
	ids   []engine.Token
}

// LoadScript reads a script file (at most MaxScriptBytes) for the model.
func LoadScript(path string, m *tokenizer.Model) (*Script, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mocker script: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxScriptBytes+1))
	if err != nil {
		return nil, fmt.Errorf("mocker script %s: %w", path, err)
	}
	if len(data) > MaxScriptBytes {
		return nil, fmt.Errorf("mocker script %s: larger than %d bytes", path, MaxScriptBytes)
	}
	s, err := ParseScript(data, m)
	if err != nil {
		return nil, fmt.Errorf("mocker script %s: %w", path, err)
	}
	return s, nil
}

// ParseScript parses a script and tokenizes its replies with m's tokenizer.
func ParseScript(data []byte, m *tokenizer.Model) (*Script, error) {
	if m == nil || m.Tokenizer == nil {
		return nil, errors.New("a script needs the model's tokenizer")
	}
	var file struct {
		Rules []scriptRule `json:"rules"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("not a script: %w", err)
	}
	if len(file.Rules) == 0 {
		return nil, errors.New(`no "rules"`)
	}
	s := &Script{rules: file.Rules, tok: m.Tokenizer}
	for i := range s.rules {
		r := &s.rules[i]
		switch r.Role {
		case "", "user", "tool":
		default:
			return nil, fmt.Errorf("rules[%d].role %q: want user or tool", i, r.Role)
		}
		r.ids = m.Tokenizer.Encode(r.Reply)
	}
	if m.Template != nil {
		s.learnMarkers(m.Template)
	}
	return s, nil
}

// Probe texts: nothing a template adds contains them.
const (
	probeA = "\x01mocker-probe-a\x01"
	probeB = "\x01mocker-probe-b\x01"
	probeC = "\x01mocker-probe-c\x01"
)

func render(t tokenizer.ChatTemplate, gen bool, msgs ...[2]string) (string, bool) {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	ms := make([]msg, len(msgs))
	for i, m := range msgs {
		ms[i] = msg{m[0], m[1]}
	}
	raw, _ := json.Marshal(ms)
	out, err := t.Render(tokenizer.ChatInput{Messages: raw, AddGenerationPrompt: gen})
	return out, err == nil
}

// learnMarkers finds the template's user prefix (the text right before a
// user message that follows an assistant one, less the assistant's
// suffix), user suffix and generation prompt. A template that refuses the
// probes leaves them empty.
func (s *Script) learnMarkers(t tokenizer.ChatTemplate) {
	one, ok1 := render(t, false, [2]string{"user", probeA})
	oneGen, ok2 := render(t, true, [2]string{"user", probeA})
	two, ok3 := render(t, false, [2]string{"user", probeA}, [2]string{"assistant", probeB})
	three, ok4 := render(t, false, [2]string{"user", probeA}, [2]string{"assistant", probeB}, [2]string{"user", probeC})
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return
	}
	_, userSuffix, ok := strings.Cut(one, probeA)
	if !ok {
		return
	}
	_, asstSuffix, _ := strings.Cut(two, probeB)
	_, between, ok := strings.Cut(three, probeB)
	if !ok {
		return
	}
	between, _, ok = strings.Cut(between, probeC)
	if !ok {
		return
	}
	s.userPrefix = strings.TrimPrefix(between, asstSuffix)
	s.userSuffix = userSuffix
	if strings.HasPrefix(oneGen, one) {
		s.genPrompt = oneGen[len(one):]
	}
}

// split returns the last user message of a rendered prompt and what
// follows it (before the generation prompt).
func (s *Script) split(prompt string) (user, after string) {
	prompt = strings.TrimSuffix(prompt, s.genPrompt)
	if s.userPrefix == "" {
		return prompt, ""
	}
	i := strings.LastIndex(prompt, s.userPrefix)
	if i < 0 {
		return prompt, ""
	}
	user = prompt[i+len(s.userPrefix):]
	if s.userSuffix != "" {
		if j := strings.Index(user, s.userSuffix); j >= 0 {
			return user[:j], user[j+len(s.userSuffix):]
		}
	}
	return user, ""
}

// Reply returns the scripted reply for a prompt, if a rule matches.
func (s *Script) Reply(prompt []engine.Token) ([]engine.Token, bool) {
	if s == nil {
		return nil, false
	}
	user, after := s.split(s.tok.Decode(prompt))
	hasAfter := strings.TrimSpace(after) != ""
	for _, r := range s.rules {
		switch r.Role {
		case "tool":
			if hasAfter && strings.Contains(after, r.When) {
				return r.ids, true
			}
		default:
			if strings.Contains(user, r.When) {
				return r.ids, true
			}
		}
	}
	return nil, false
}
