package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tandemllm/tandem/tokenid"
)

type qwenEncodeCase struct {
	Text    string       `json:"text"`
	IDs     []tokenid.ID `json:"ids"`
	Decoded string       `json:"decoded"`
	Pieces  []string     `json:"pieces"`
}

type qwenChatCase struct {
	Name                string                     `json:"name"`
	Messages            json.RawMessage            `json:"messages"`
	Tools               json.RawMessage            `json:"tools"`
	Kwargs              map[string]json.RawMessage `json:"kwargs"`
	AddGenerationPrompt bool                       `json:"add_generation_prompt"`
	Expected            string                     `json:"expected"`
	IDs                 []tokenid.ID               `json:"ids"`
}

func readFixture[T any](t *testing.T, name string) []T {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []T `json:"cases"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(f.Cases) == 0 {
		t.Fatalf("%s: no cases", name)
	}
	return f.Cases
}

func TestQwen3Encode(t *testing.T) {
	m := testQwen3(t)
	tok := m.Tokenizer
	for _, c := range readFixture[qwenEncodeCase](t, "qwen3-encode.json") {
		t.Run(c.Text, func(t *testing.T) {
			got := tok.Encode(c.Text)
			if !slices.Equal(got, c.IDs) {
				t.Errorf("Encode(%q)\n got %v\nwant %v", c.Text, got, c.IDs)
			}
			if d := tok.Decode(c.IDs); d != c.Decoded {
				t.Errorf("Decode = %q, want %q", d, c.Decoded)
			}
			for i, id := range c.IDs {
				if p := tok.Decode([]tokenid.ID{id}); p != c.Pieces[i] {
					t.Errorf("Decode([%d]) = %q, want %q", id, p, c.Pieces[i])
				}
			}
			// Streaming must agree with the one-shot decode.
			d := NewDetokenizer(tok)
			var sb strings.Builder
			for _, id := range c.IDs {
				s := d.Add(id)
				if !utf8.ValidString(s) {
					t.Errorf("Add(%d) = %q: invalid UTF-8", id, s)
				}
				sb.WriteString(s)
			}
			sb.WriteString(d.Flush())
			if sb.String() != c.Decoded {
				t.Errorf("streamed %q, want %q", sb.String(), c.Decoded)
			}
		})
	}
}

// TestQwen3EncodeRandom covers breadth: 200 random mixes of scripts,
// marks, digits, whitespace kinds and special tokens.
func TestQwen3EncodeRandom(t *testing.T) {
	tok := testQwen3(t).Tokenizer
	for _, c := range readFixture[qwenEncodeCase](t, "qwen3-encode-random.json") {
		if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Errorf("Encode(%q)\n got %v\nwant %v", c.Text, got, c.IDs)
		}
	}
}

func TestQwen3ChatTemplate(t *testing.T) {
	m := testQwen3(t)
	for _, c := range readFixture[qwenChatCase](t, "qwen3-chat.json") {
		t.Run(c.Name, func(t *testing.T) {
			tools := c.Tools
			if string(tools) == "null" {
				tools = nil
			}
			got, err := m.Template.Render(ChatInput{Messages: c.Messages, Tools: tools, Kwargs: c.Kwargs, AddGenerationPrompt: c.AddGenerationPrompt})
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if got != c.Expected {
				t.Errorf("Render mismatch\n got %q\nwant %q", got, c.Expected)
			}
			if ids := m.Tokenizer.Encode(got); !slices.Equal(ids, c.IDs) {
				t.Errorf("Encode(rendered)\n got %v\nwant %v", ids, c.IDs)
			}
		})
	}
}

func TestQwen3Model(t *testing.T) {
	m := testQwen3(t)
	tok := m.Tokenizer
	if got, want := tok.EOS(), []tokenid.ID{151645, 151643}; !slices.Equal(got, want) {
		t.Errorf("EOS = %v, want %v (<|im_end|>, <|endoftext|>)", got, want)
	}
	if _, ok := tok.BOS(); ok {
		t.Error("Qwen3 must not prepend a BOS")
	}
	if got := tok.VocabSize(); got != 151669 {
		t.Errorf("VocabSize = %d, want 151669", got)
	}
	if m.ContextLength != 131072 {
		t.Errorf("ContextLength = %d, want 131072 (model_max_length)", m.ContextLength)
	}
	if m.Name != filepath.Base(qwenDir) {
		t.Errorf("Name = %q", m.Name)
	}
	for id, special := range map[tokenid.ID]bool{151645: true, 151643: true, 151667: false, 9707: false} {
		if IsSpecial(tok, id) != special {
			t.Errorf("IsSpecial(%d) = %v", id, !special)
		}
	}
	if got := DecodeSkipSpecial(tok, tok.Encode("<|im_start|>assistant\n<think>hi</think><|im_end|>")); got != "assistant\n<think>hi</think>" {
		t.Errorf("DecodeSkipSpecial = %q", got)
	}
	def := testDefault(t)
	if tok.Fingerprint() == def.Tokenizer.Fingerprint() || len(tok.Fingerprint()) != 64 {
		t.Errorf("fingerprints: qwen %s default %s", tok.Fingerprint(), def.Tokenizer.Fingerprint())
	}
}
