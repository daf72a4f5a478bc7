package tokenizer

import (
	"fmt"

	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/tandemllm/tandem/tokenid"
)

// DefaultModelName is the name of the built-in model.
const DefaultModelName = "tandem-mock"

// DefaultContextLength is the built-in model's context length.
const DefaultContextLength = 32768

// Special tokens of the built-in model. <|endoftext|> and <|endofprompt|>
// are o200k_base's own. o200k_base has no ChatML tokens, so <|im_start|> and
// <|im_end|> are Tandem's additions, given the first two ids above the
// highest o200k special (200018); the vocabulary is therefore 200021 ids,
// with holes at 199998 and 200000-200017 that decode to nothing.
const (
	O200kEndOfText   tokenid.ID = 199999
	O200kEndOfPrompt tokenid.ID = 200018
	MockImStart      tokenid.ID = 200019
	MockImEnd        tokenid.ID = 200020
)

// Default returns the built-in model "tandem-mock": OpenAI's o200k_base
// vocabulary, read from the copy embedded in tiktoken-go-loader (nothing is
// fetched at run time), plus ChatML tokens and the BuiltinChatML template.
// Generation ends at <|im_end|> or <|endoftext|>; there is no BOS.
//
// The ranks come from tiktoken-go-loader's offline loader, but encoding runs
// on this package's byte-level BPE: tiktoken-go's encoder converts the text
// to []rune and allocates for every piece, too slow for the frontend's
// latency budget (docs/benchmarks.md, "Figures moved out of code
// comments"). Tests check both agree. Default is costly (it builds the
// whole vocabulary); call it once and share the result.
func Default() (*Model, error) {
	// tiktoken-go-loader embeds four vocabularies and links all of them
	// (the three unused cost some MB: docs/benchmarks/layers.md): kept,
	// because copying o200k_base into this repository would commit a file
	// fetched from elsewhere.
	ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe("o200k_base.tiktoken")
	if err != nil {
		return nil, fmt.Errorf("load embedded o200k_base: %w", err)
	}
	added := []AddedToken{
		{ID: O200kEndOfText, Content: "<|endoftext|>", Special: true},
		{ID: O200kEndOfPrompt, Content: "<|endofprompt|>", Special: true},
		{ID: MockImStart, Content: "<|im_start|>", Special: true},
		{ID: MockImEnd, Content: "<|im_end|>", Special: true},
	}
	tok, err := newTiktoken("o200k_base", ranks, PatternO200k, added, []tokenid.ID{MockImEnd, O200kEndOfText})
	if err != nil {
		return nil, fmt.Errorf("o200k_base: %w", err)
	}
	tmpl, err := NewChatTemplate(BuiltinChatML, map[string]string{"eos_token": "<|im_end|>"})
	if err != nil {
		return nil, err
	}
	return &Model{Name: DefaultModelName, Tokenizer: tok, Template: tmpl, ContextLength: DefaultContextLength}, nil
}

// newTiktoken builds a byte-level BPE from tiktoken mergeable ranks (token
// bytes → rank, the rank being the id).
func newTiktoken(name string, ranks map[string]int, pattern string, added []AddedToken, eos []tokenid.ID) (*byteLevel, error) {
	n := 0
	for _, r := range ranks {
		if r < 0 || r >= 1<<24 {
			return nil, fmt.Errorf("rank %d out of range", r)
		}
		n = max(n, r+1)
	}
	for _, a := range added {
		n = max(n, int(a.ID)+1)
	}
	tokens := make([]string, n)
	present := make([]bool, n)
	for tok, r := range ranks {
		if present[r] {
			return nil, fmt.Errorf("rank %d used twice", r)
		}
		tokens[r], present[r] = tok, true
	}
	return newByteLevel(byteLevelConfig{
		kind:    "tiktoken/" + name,
		tokens:  tokens,
		present: present,
		vocab:   ranks,
		pattern: pattern,
		added:   added,
		eos:     eos,
		bos:     -1,
	})
}

// Load returns the model of a --model flag: the built-in tandem-mock when
// dir is empty, else LoadDir(dir).
func Load(dir string) (*Model, error) {
	if dir == "" {
		return Default()
	}
	return LoadDir(dir)
}
