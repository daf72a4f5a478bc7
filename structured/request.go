package structured

import (
	"fmt"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/tokenid"
	"github.com/tandemllm/tandem/tokenizer"
)

// ForRequest compiles a request's constraint against an engine's
// vocabulary (cached per constraint and vocabulary in Shared) and returns
// a fresh matcher for the sequence. What it cannot honour is refused as
// engine.ErrInvalidRequest naming the request field, before any token is
// generated. Both in-process engines (the mocker, the native engine) call
// it; v is nil when the engine was started without token byte strings.
func ForRequest(c *engine.Constraint, v *Vocab) (*Matcher, error) {
	field := c.Field
	if field == "" {
		field = "response_format"
	}
	if v == nil {
		return nil, fmt.Errorf("%w: %s: this engine was started without the token byte strings constraints need", engine.ErrInvalidRequest, field)
	}
	comp, err := Shared.Get(string(c.Kind), c.Spec, v)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", engine.ErrInvalidRequest, field, err)
	}
	return comp.NewMatcher(), nil
}

// TokenizerVocab is a tokenizer's vocabulary as the masks need it: each
// token's bytes, with special tokens (which the frontend does not render)
// and holes as none, so a mask never allows them. Built once per process
// and shared by its workers (the mask caches key on it).
func TokenizerVocab(tok tokenizer.Tokenizer) (*Vocab, error) {
	n := tok.VocabSize()
	sp, _ := tok.(tokenizer.SpecialTokens)
	toks := make([][]byte, n)
	for id := range n {
		if sp != nil && sp.IsSpecial(tokenid.ID(id)) {
			continue
		}
		toks[id] = tok.AppendTokenBytes(nil, tokenid.ID(id))
	}
	v, err := NewVocab(toks, tok.EOS())
	if err != nil {
		return nil, fmt.Errorf("structured outputs vocabulary: %w", err)
	}
	return v, nil
}
