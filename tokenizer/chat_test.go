package tokenizer

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

func TestChatTemplateRender(t *testing.T) {
	tests := []struct {
		name     string
		template string
		in       ChatInput
		want     string
		wantErr  string
	}{
		{"key-order", `{{ messages[0] | tojson }}`,
			ChatInput{Messages: []byte(`[{"z":1,"a":{"y":[true,null],"b":"x"},"m":2.5}]`)},
			`{"z": 1, "a": {"y": [true, null], "b": "x"}, "m": 2.5}`, ""},
		{"no-html-escape", `{{ messages[0].content | tojson }}`,
			ChatInput{Messages: []byte(`[{"content":"<b>&é🎉\"\n"}]`)},
			`"<b>&é🎉\"\n"`, ""},
		{"kwargs", `{{ enable_thinking }} {{ extra.k }}`,
			ChatInput{Messages: []byte(`[]`), Kwargs: map[string]json.RawMessage{"enable_thinking": []byte(`false`), "extra": []byte(`{"k":"v"}`)}},
			`False v`, ""},
		{"tools-none", `{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }}`,
			ChatInput{Messages: []byte(`[]`), Tools: []byte(` null `), AddGenerationPrompt: true},
			`True True True`, ""},
		{"tools", `{% for t in tools %}{{ t.function.name }};{% endfor %}`,
			ChatInput{Messages: []byte(`[]`), Tools: []byte(`[{"function":{"name":"a"}},{"function":{"name":"b"}}]`)},
			`a;b;`, ""},
		{"specials", `{{ bos_token }}|{{ eos_token }}`, ChatInput{Messages: []byte(`[]`)}, `<s>|</s>`, ""},
		{"null-content", `[{{ messages[0].content }}]`, ChatInput{Messages: []byte(`[{"role":"assistant","content":null}]`)}, `[]`, ""},
		{"parts-joined", `{{ messages[0].content }}`,
			ChatInput{Messages: []byte(`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`)}, "a\nb", ""},
		{"parts-kept-for-openai-templates", `{% for p in message_list %}{% endfor %}{% for m in messages %}{% for p in m.content %}{{ p.text }}.{% endfor %}{% endfor %}`,
			ChatInput{Messages: []byte(`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{}}]}]`)}, "a..", ""},
		{"image-part-rejected", `{{ messages[0].content }}`,
			ChatInput{Messages: []byte(`[{"role":"user","content":[{"type":"image_url"}]}]`)}, "", "unsupported content part"},
		{"reserved-kwarg", `x`, ChatInput{Messages: []byte(`[]`), Kwargs: map[string]json.RawMessage{"messages": []byte(`[]`)}}, "", "may not set"},
		{"messages-object", `x`, ChatInput{Messages: []byte(`{"role":"user"}`)}, "", "must be a JSON array"},
		{"messages-invalid", `x`, ChatInput{Messages: []byte(`[{"role":`)}, "", "invalid JSON"},
		{"messages-trailing", `x`, ChatInput{Messages: []byte(`[] []`)}, "", "trailing"},
		{"messages-missing", `x`, ChatInput{}, "", "messages"},
		{"tools-object", `x`, ChatInput{Messages: []byte(`[]`), Tools: []byte(`{}`)}, "", "tools must be a JSON array"},
		{"kwarg-invalid", `x`, ChatInput{Messages: []byte(`[]`), Kwargs: map[string]json.RawMessage{"k": []byte(`{`)}}, "", "chat_template_kwargs"},
		{"deep", `x`, ChatInput{Messages: []byte(strings.Repeat("[", 10000) + strings.Repeat("]", 10000))}, "", "nested deeper"},
		{"raise", `{{ raise_exception("bad role") }}`, ChatInput{Messages: []byte(`[]`)}, "", "bad role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := NewChatTemplate(tt.template, map[string]string{"bos_token": "<s>", "eos_token": "</s>"})
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := NewChatTemplate(`{% if %}`, nil); err == nil {
		t.Error("bad template compiled")
	}
}

func TestChatTemplateConcurrent(t *testing.T) {
	tmpl, err := NewChatTemplate(BuiltinChatML, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := ChatInput{Messages: []byte(`[{"role":"user","content":"hi"}]`), AddGenerationPrompt: true}
	want, _ := tmpl.Render(in)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				if got, err := tmpl.Render(in); err != nil || got != want {
					t.Errorf("concurrent render = %q, %v", got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
