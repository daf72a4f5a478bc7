package tokenizer

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// maxTemplateFile bounds a chat template file read whole (real templates
// are a few KiB; tokenizer_config.json files that carry one can be larger).
const maxTemplateFile = maxHFFile

// ChatTemplateOf returns the chat template source a Hugging Face directory
// carries (tokenizer_config.json's chat_template, else chat_template.jinja,
// else chat_template.json), "" when it has none.
func ChatTemplateOf(dir string) (string, error) {
	var cfg hfConfigFile
	if err := readJSONFile(filepath.Join(dir, "tokenizer_config.json"), &cfg); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	src, _, err := chatTemplateSource(dir, cfg.ChatTemplate)
	return src, err
}

// ReadChatTemplateFile reads the chat template named by a --chat-template
// flag: a Jinja file (chat_template.jinja, or any text file), a JSON file
// with a chat_template field (tokenizer_config.json, chat_template.json), or
// a Hugging Face directory (ChatTemplateOf). A source with no template is an
// error.
func ReadChatTemplateFile(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	var src string
	switch {
	case st.IsDir():
		if src, err = ChatTemplateOf(path); err != nil {
			return "", fmt.Errorf("chat template: %w", err)
		}
	case strings.EqualFold(filepath.Ext(path), ".json"):
		var cfg hfConfigFile
		if err := readJSONFile(path, &cfg); err != nil {
			return "", fmt.Errorf("chat template: %w", err)
		}
		// chatTemplateSource reads the field from cfg; the directory is
		// consulted only when the field is absent, which is an error here.
		if len(cfg.ChatTemplate) == 0 {
			return "", fmt.Errorf("chat template: %s has no chat_template field", path)
		}
		if src, _, err = chatTemplateSource(filepath.Dir(path), cfg.ChatTemplate); err != nil {
			return "", fmt.Errorf("chat template: %w", err)
		}
	default:
		f, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("chat template: %w", err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxTemplateFile+1))
		if err != nil {
			return "", fmt.Errorf("chat template: %s: %w", path, err)
		}
		if len(b) > maxTemplateFile {
			return "", fmt.Errorf("chat template: %s: larger than %d bytes", path, maxTemplateFile)
		}
		src = string(b)
	}
	if strings.TrimSpace(src) == "" {
		return "", fmt.Errorf("chat template: %s holds no template", path)
	}
	return src, nil
}

// ChatTemplateFix is what an operator does about a model without a chat
// template; errors about one end with it.
const ChatTemplateFix = "serve it with --chat-template FILE (a Jinja chat template such as the original model's chat_template.jinja, or its tokenizer_config.json), or send /v1/completions requests"

// ErrNoChatTemplate is the error a model without a chat template gives a
// chat request (see MissingChatTemplate).
var ErrNoChatTemplate = errors.New("no chat template")

// MissingChatTemplate is the template of a model whose file carries none
// (a GGUF without tokenizer.chat_template): every Render fails with an
// error naming the fix, so a chat request is refused rather than sent to
// the model as raw text in a format it was not trained on.
func MissingChatTemplate(model string) ChatTemplate { return missingTemplate{model} }

type missingTemplate struct{ model string }

func (m missingTemplate) Render(ChatInput) (string, error) {
	return "", fmt.Errorf("model %s has %w: %s", m.model, ErrNoChatTemplate, ChatTemplateFix)
}

// IsMissingChatTemplate reports whether t is MissingChatTemplate's.
func IsMissingChatTemplate(t ChatTemplate) bool {
	_, ok := t.(missingTemplate)
	return ok
}

// SpecialsOf returns the template variables bos_token and eos_token as
// the text of t's BOS and first EOS token, for a template given apart from
// the tokenizer's own configuration (--chat-template). A token that renders
// as nothing (a SentencePiece control piece) is left out.
func SpecialsOf(t Tokenizer) map[string]string {
	out := map[string]string{}
	if id, _ := t.BOS(); id >= 0 {
		if s := string(t.AppendTokenBytes(nil, id)); s != "" {
			out["bos_token"] = s
		}
	}
	if eos := t.EOS(); len(eos) > 0 {
		if s := string(t.AppendTokenBytes(nil, eos[0])); s != "" {
			out["eos_token"] = s
		}
	}
	return out
}

// Llama2CTokenizerHint says where a llama2.c checkpoint's tokenizer comes
// from, for errors about a missing one.
const Llama2CTokenizerHint = "llama2.c checkpoints come with theirs: put tok512.bin (stories260K) or tokenizer.bin (stories15M-110M) from huggingface.co/karpathy/tinyllamas beside the checkpoint, or use a GGUF that carries one (tandem model gen --tokenizer)"
