package native

import (
	"fmt"

	"github.com/tandemllm/tandem/engine/native/model"
	"github.com/tandemllm/tandem/tokenizer"
)

func loadGGUF(path string) (*Loaded, error) {
	m, err := model.LoadGGUF(path)
	if err != nil {
		return nil, err
	}
	tok, err := VocabTokenizer(m.Vocab)
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", path, err)
	}
	return &Loaded{Model: m, Tokenizer: tok, Path: path}, nil
}

// VocabTokenizer builds the tokenizer a GGUF file describes. SentencePiece
// ("llama") vocabularies get BOS/EOS from metadata; byte-level ("gpt2")
// ones are built without added tokens for now (see the package report).
func VocabTokenizer(v *model.Vocab) (tokenizer.Tokenizer, error) {
	if v == nil {
		return nil, fmt.Errorf("no tokenizer in the model file (tokenizer.ggml.model missing)")
	}
	switch v.Model {
	case "llama":
		return tokenizer.NewSentencePieceBPE(v.Tokens, v.Scores, v.Types, v.BOS, v.EOS)
	case "gpt2":
		return tokenizer.NewByteLevelBPE(v.Tokens, v.Merges, nil, v.Pre)
	}
	return nil, fmt.Errorf("unsupported tokenizer model %q", v.Model)
}
