package native

import (
	"fmt"

	"github.com/tandemllm/tandem/engine/native/model"
	"github.com/tandemllm/tandem/structured"
	"github.com/tandemllm/tandem/tokenizer"
)

// loadGGUF reads a GGUF file, building its tokenizer and the structured
// outputs vocabulary on another goroutine while the weights load (both
// are a fair part of the start on a small machine and need only the
// vocabulary, which the file gives first).
func loadGGUF(path string) (*Loaded, error) {
	var (
		tok     tokenizer.Tokenizer
		terr    error
		sv      *structured.Vocab
		started bool
		done    = make(chan struct{})
	)
	m, err := model.LoadGGUFWith(path, func(v *model.Vocab) {
		started = true
		go func() {
			defer close(done)
			if tok, terr = VocabTokenizer(v); terr == nil {
				// Its error, if any, comes again from the caller's own
				// build (engines.Config.Build), which then reports it.
				sv, _ = structured.TokenizerVocab(tok)
			}
		}()
	})
	if started {
		<-done
	}
	if err != nil {
		return nil, err
	}
	if !started {
		tok, terr = VocabTokenizer(m.Vocab)
	}
	if terr != nil {
		return nil, fmt.Errorf("gguf %s: %w", path, terr)
	}
	return &Loaded{Model: m, Tokenizer: tok, Path: path, Structured: sv}, nil
}

// VocabTokenizer builds the tokenizer a GGUF file describes. SentencePiece
// ("llama") vocabularies get BOS/EOS from metadata. Byte-level ("gpt2")
// ones get their control and user-defined tokens as added tokens (matched
// literally in text, as llama.cpp and HF do; control tokens are special and
// skipped in output), and EOS/BOS from metadata.
func VocabTokenizer(v *model.Vocab) (tokenizer.Tokenizer, error) {
	if v == nil {
		return nil, fmt.Errorf("no tokenizer in the model file (tokenizer.ggml.model missing)")
	}
	switch v.Model {
	case "llama":
		return tokenizer.NewSentencePieceBPE(v.Tokens, v.Scores, v.Types, v.BOS, v.EOS)
	case "gpt2":
		var added []tokenizer.AddedToken
		for i, t := range v.Types {
			if (t == tokenizer.TypeControl || t == tokenizer.TypeUserDefined) && i < len(v.Tokens) && v.Tokens[i] != "" {
				added = append(added, tokenizer.AddedToken{ID: int32(i), Content: v.Tokens[i], Special: t == tokenizer.TypeControl})
			}
		}
		tok, err := tokenizer.NewByteLevelBPE(v.Tokens, v.Merges, added, v.Pre)
		if err != nil {
			return nil, err
		}
		var eos []int32
		if v.EOS >= 0 {
			eos = []int32{v.EOS}
		}
		return tokenizer.WithSpecials(tok, eos, v.BOS, v.AddBOS && v.BOS >= 0)
	}
	return nil, fmt.Errorf("unsupported tokenizer model %q", v.Model)
}
