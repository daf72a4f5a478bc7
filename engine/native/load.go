package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tandemllm/tandem/engine/native/model"
	"github.com/tandemllm/tandem/structured"
	"github.com/tandemllm/tandem/tokenizer"
)

// Loaded is a model file read into memory together with its tokenizer.
type Loaded struct {
	Model     *model.Model
	Tokenizer tokenizer.Tokenizer
	// Path is the weights file that was read.
	Path string
	// Structured is structured.TokenizerVocab(Tokenizer) where the load
	// built it alongside the weights (GGUF files), else nil.
	Structured *structured.Vocab
}

// LoadModel reads a model from a file or a directory. A directory is
// searched for one *.gguf file, else one llama2.c *.bin checkpoint with
// its tokenizer (tok*.bin or tokenizer.bin) beside it. A llama2.c file
// given directly takes its tokenizer from the same directory.
func LoadModel(path string) (*Loaded, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("native: %w", err)
	}
	file := path
	if st.IsDir() {
		if _, err := os.Stat(filepath.Join(path, "config.json")); err == nil {
			return loadHF(path)
		}
		if file, err = pickModelFile(path); err != nil {
			return nil, err
		}
	}
	if strings.EqualFold(filepath.Ext(file), ".gguf") {
		return loadGGUF(file)
	}
	m, err := model.LoadLlama2C(file)
	if err != nil {
		return nil, err
	}
	tp, err := findLlama2CTokenizer(filepath.Dir(file), file)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.LoadLlama2C(tp)
	if err != nil {
		return nil, fmt.Errorf("native: tokenizer %s: %w", tp, err)
	}
	return &Loaded{Model: m, Tokenizer: tok, Path: file}, nil
}

// loadHF reads a Hugging Face directory and the tokenizer beside the
// weights (tokenizer.json, or a llama2.c tokenizer.bin).
func loadHF(dir string) (*Loaded, error) {
	m, err := model.LoadHF(dir)
	if err != nil {
		return nil, fmt.Errorf("native: %w", err)
	}
	tm, err := tokenizer.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("native: tokenizer of %s: %w", dir, err)
	}
	if len(m.EOS) == 0 {
		m.EOS = tm.Tokenizer.EOS()
	}
	if b, ok := tm.Tokenizer.BOS(); ok && m.BOS < 0 {
		m.BOS = b
	}
	return &Loaded{Model: m, Tokenizer: tm.Tokenizer, Path: dir}, nil
}

func pickModelFile(dir string) (string, error) {
	ggufs, _ := filepath.Glob(filepath.Join(dir, "*.gguf"))
	if len(ggufs) == 1 {
		return ggufs[0], nil
	}
	if len(ggufs) > 1 {
		return "", fmt.Errorf("native: %s holds several .gguf files %v; name one", dir, ggufs)
	}
	bins, _ := filepath.Glob(filepath.Join(dir, "*.bin"))
	var ckpts []string
	for _, b := range bins {
		if !isTokenizerName(filepath.Base(b)) {
			ckpts = append(ckpts, b)
		}
	}
	sort.Strings(ckpts)
	switch len(ckpts) {
	case 0:
		return "", fmt.Errorf("native: %s holds no .gguf or llama2.c .bin model", dir)
	case 1:
		return ckpts[0], nil
	}
	return "", fmt.Errorf("native: %s holds several checkpoints %v; name one", dir, ckpts)
}

func isTokenizerName(name string) bool {
	return strings.HasPrefix(name, "tok") && strings.HasSuffix(name, ".bin")
}

func findLlama2CTokenizer(dir, model string) (string, error) {
	bins, _ := filepath.Glob(filepath.Join(dir, "*.bin"))
	var toks []string
	for _, b := range bins {
		if b != model && isTokenizerName(filepath.Base(b)) {
			toks = append(toks, b)
		}
	}
	sort.Strings(toks)
	if len(toks) == 0 {
		return "", errors.New("native: no llama2.c tokenizer (tok*.bin, tokenizer.bin) beside " + model + "; " + tokenizer.Llama2CTokenizerHint)
	}
	return toks[0], nil
}

// Load reads a model (see LoadModel) and starts an engine on it.
func Load(path string, opts Options) (*Engine, *Loaded, error) {
	l, err := LoadModel(path)
	if err != nil {
		return nil, nil, err
	}
	if opts.Model == "" {
		opts.Model = strings.TrimSuffix(filepath.Base(l.Path), filepath.Ext(l.Path))
	}
	e, err := New(l.Model, opts)
	if err != nil {
		return nil, nil, err
	}
	return e, l, nil
}

// ServedModel is the tokenizer side of a model LoadModel reads, for
// `tandem serve --engine native --model PATH`: a Hugging Face directory
// (or any directory with tokenizer.json) gets its tokenizer and chat
// template from tokenizer.LoadDir; a GGUF file the tokenizer and chat
// template (tokenizer.chat_template) it carries; a llama2.c checkpoint,
// whose format has no place for a template, the tokenizer beside it with
// the plain-join template. A GGUF without a template gets
// tokenizer.MissingChatTemplate, so chat requests fail with the fix
// rather than reach the model as raw text.
func ServedModel(path string) (*tokenizer.Model, error) { return ServedModelTemplate(path, "") }

// ServedModelTemplate is ServedModel with the chat template source
// template (from --chat-template) in place of the model's own when it is
// not empty.
func ServedModelTemplate(path, template string) (*tokenizer.Model, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		if _, err := os.Stat(filepath.Join(path, "tokenizer.json")); err == nil {
			m, err := tokenizer.LoadDir(path)
			if err != nil || template == "" {
				return m, err
			}
			if m.Template, err = tokenizer.NewChatTemplate(template, tokenizer.SpecialsOf(m.Tokenizer)); err != nil {
				return nil, fmt.Errorf("--chat-template: %w", err)
			}
			return m, nil
		}
	}
	l, err := LoadModel(path)
	if err != nil {
		return nil, err
	}
	return ServedModelLoaded(l, template)
}

// ServedModelLoaded is ServedModelTemplate for a model already read (one
// LoadModel whose weights the workers of a process share), for files
// whose tokenizer is in or beside the weights.
func ServedModelLoaded(l *Loaded, template string) (*tokenizer.Model, error) {
	var err error
	name := strings.TrimSuffix(filepath.Base(l.Path), filepath.Ext(l.Path))
	tm := &tokenizer.Model{Name: name, Tokenizer: l.Tokenizer, ContextLength: l.Model.Config.SeqLen}
	specials := tokenizer.SpecialsOf(l.Tokenizer)
	src, origin := template, "--chat-template"
	if v := l.Model.Vocab; v != nil {
		// The vocabulary's own pieces: SentencePiece control tokens render
		// as nothing through the tokenizer, but templates want "<s>".
		for key, id := range map[string]int32{"bos_token": v.BOS, "eos_token": v.EOS} {
			if id >= 0 && int(id) < len(v.Tokens) {
				specials[key] = v.Tokens[id]
			}
		}
		if src == "" {
			src, origin = v.ChatTemplate, l.Path+": tokenizer.chat_template"
		}
	}
	switch {
	case src != "":
		if tm.Template, err = tokenizer.NewChatTemplate(src, specials); err != nil {
			return nil, fmt.Errorf("%s: %w", origin, err)
		}
	case strings.EqualFold(filepath.Ext(l.Path), ".gguf"):
		tm.Template = tokenizer.MissingChatTemplate(name)
	default:
		if tm.Template, err = tokenizer.NewChatTemplate(tokenizer.BuiltinJoin, nil); err != nil {
			return nil, err
		}
	}
	return tm, nil
}
