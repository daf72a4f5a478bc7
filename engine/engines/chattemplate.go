package engines

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/tandemllm/tandem/engine/native"
	"github.com/tandemllm/tandem/tokenizer"
)

// servedModel loads the tokenizer side of --model with --chat-template
// applied, and says in the log when the model has no chat template (chat
// requests then fail with the fix instead of sending raw text).
func (e *Config) servedModel(log *slog.Logger) (*tokenizer.Model, error) {
	var src string
	if e.chatTemplate != "" {
		var err error
		if src, err = tokenizer.ReadChatTemplateFile(e.chatTemplate); err != nil {
			return nil, fmt.Errorf("--chat-template: %w", err)
		}
	}
	var model *tokenizer.Model
	var err error
	if e.Kind == "native" && e.ModelDir != "" {
		// GGUF files carry their tokenizer and template; HF directories
		// have theirs. A file is read once, for the tokenizer and for
		// every worker (nativeModel).
		if st, serr := os.Stat(e.ModelDir); serr == nil && st.IsDir() {
			model, err = native.ServedModelTemplate(e.ModelDir, src)
		} else {
			var l *native.Loaded
			if l, err = e.nativeModel(); err == nil {
				model, err = native.ServedModelLoaded(l, src)
				// Its tokenizer is l's: Build takes the structured
				// vocabulary the load built beside the weights.
				e.servedVocab = l.Structured
			}
		}
	} else {
		model, err = tokenizer.Load(e.ModelDir)
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

// nativeModel reads --model once: every native worker of the process runs
// on the same weights (a GGUF's one read-only mapping), since the model is
// read-only after loading and each engine keeps its own state and KV cache.
func (e *Config) nativeModel() (*native.Loaded, error) {
	e.loadMu.Lock()
	defer e.loadMu.Unlock()
	if e.loaded == nil {
		l, err := native.LoadModel(e.ModelDir)
		if err != nil {
			return nil, err
		}
		if e.noMmap {
			l.Model.CopyOutOfMapping()
		}
		e.loaded = l
	}
	return e.loaded, nil
}
