package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadChatTemplateFile: --chat-template takes a Jinja file, a JSON file
// with chat_template (a string or named templates), or a directory, and
// refuses a source that holds no template.
func TestReadChatTemplateFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const tmpl = "{{ messages[0].content }}"
	for _, tt := range []struct {
		name, path, want, err string
	}{
		{"jinja", write("a/chat_template.jinja", tmpl), tmpl, ""},
		{"config", write("b/tokenizer_config.json", `{"chat_template": "`+tmpl+`"}`), tmpl, ""},
		{"named", write("c/tokenizer_config.json", `{"chat_template": [{"name":"tool_use","template":"x"},{"name":"default","template":"`+tmpl+`"}]}`), tmpl, ""},
		{"directory", filepath.Join(dir, "a"), tmpl, ""},
		{"json without the field", write("d/tokenizer_config.json", `{"eos_token": "x"}`), "", "no chat_template field"},
		{"empty", write("e.jinja", "  \n"), "", "holds no template"},
		{"missing", filepath.Join(dir, "nope.jinja"), "", "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadChatTemplateFile(tt.path)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("= %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestMissingChatTemplate(t *testing.T) {
	tm := MissingChatTemplate("m")
	_, err := tm.Render(ChatInput{Messages: []byte(`[]`)})
	if err == nil || !strings.Contains(err.Error(), "--chat-template FILE") || !IsMissingChatTemplate(tm) {
		t.Fatalf("Render err = %v", err)
	}
}
