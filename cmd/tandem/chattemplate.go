package main

import (
	"fmt"
	"log/slog"

	"github.com/tandemllm/tandem/engine/native"
	"github.com/tandemllm/tandem/tokenizer"
)

// servedModel loads the tokenizer side of --model with --chat-template
// applied, and says in the log when the model has no chat template (chat
// requests then fail with the fix instead of sending raw text).
func (e *engineFlags) servedModel(log *slog.Logger) (*tokenizer.Model, error) {
	var src string
	if e.chatTemplate != "" {
		var err error
		if src, err = tokenizer.ReadChatTemplateFile(e.chatTemplate); err != nil {
			return nil, fmt.Errorf("--chat-template: %w", err)
		}
	}
	var model *tokenizer.Model
	var err error
	if e.kind == "native" && e.modelDir != "" {
		// GGUF files carry their tokenizer and template; HF directories
		// have theirs.
		model, err = native.ServedModelTemplate(e.modelDir, src)
	} else {
		model, err = tokenizer.Load(e.modelDir)
		if err == nil && src != "" {
			if model.Template, err = tokenizer.NewChatTemplate(src, tokenizer.SpecialsOf(model.Tokenizer)); err != nil {
				err = fmt.Errorf("--chat-template %s: %w", e.chatTemplate, err)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if tokenizer.IsMissingChatTemplate(model.Template) && log != nil {
		log.Warn("the model carries no chat template: /v1/chat/completions requests will be refused", "model", model.Name, "fix", tokenizer.ChatTemplateFix)
	}
	return model, nil
}
