package native

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tandemllm/tandem/engine/native/model"
)

// GenOptions describes a random-weight model for GenerateModel.
type GenOptions struct {
	Shape string // model.ShapeNames
	Seed  uint64
	// DType is the GGUF file type (model.QuantNames: f32, f16, q8_0,
	// q4_k_m, ...) or, for a Hugging Face directory, the safetensors dtype
	// (f32, f16, bf16).
	DType string
	// Tokenizer is a tokenizer.json (or a directory with one), a
	// SentencePiece tokenizer.model or a llama2.c tokenizer .bin carried
	// into the model (GGUF metadata, or copied into the directory). The
	// vocabulary is padded to the shape's embedding rows, or the embedding
	// grown to the tokenizer's size.
	Tokenizer string
	// HF writes a Hugging Face directory (config.json, *.safetensors)
	// instead of one GGUF file.
	HF bool
	// ChatTemplate is a Jinja chat template source written into the GGUF
	// (tokenizer.chat_template) in place of the tokenizer directory's own.
	ChatTemplate string
	// Progress, when set, is called as a GGUF's layers are encoded.
	Progress func(done, total int)
}

// GenerateModelFile writes a deterministic random-weight model of a named
// shape with no tokenizer (see GenerateModel).
func GenerateModelFile(path, shape string, seed uint64, dtype string) error {
	return GenerateModel(path, GenOptions{Shape: shape, Seed: seed, DType: dtype})
}

// GenerateModel writes a deterministic random-weight model for `tandem
// model gen`. A path ending in .bin gets a llama2.c checkpoint (fp32 llama
// shapes only); o.HF a Hugging Face directory; anything else GGUF. The
// same options always give the same bytes.
func GenerateModel(path string, o GenOptions) (err error) {
	shape, seed, dtype := o.Shape, o.Seed, o.DType
	c, err := model.Shape(shape)
	if err != nil {
		return err
	}
	var vocab *model.Vocab
	if o.Tokenizer != "" {
		if vocab, err = VocabFromFile(o.Tokenizer); err != nil {
			return err
		}
		c.Vocab = max(c.Vocab, len(vocab.Tokens))
		PadVocab(vocab, c.Vocab)
	}
	if o.ChatTemplate != "" {
		switch {
		case vocab == nil:
			return fmt.Errorf("a chat template needs a tokenizer (--tokenizer) to go with it")
		case o.HF:
			return fmt.Errorf("a Hugging Face directory takes its chat template from the tokenizer directory's tokenizer_config.json or chat_template.jinja, not --chat-template")
		case strings.EqualFold(filepath.Ext(path), ".bin"):
			return fmt.Errorf("%s: a llama2.c checkpoint has no place for a chat template; write .gguf", path)
		}
		vocab.ChatTemplate = o.ChatTemplate
	}
	if strings.EqualFold(filepath.Ext(path), ".bin") && (c.Arch != "llama" || c.QDim() != c.Dim) {
		return fmt.Errorf("%s: shape %s (%s) does not fit the llama2.c format; write .gguf", path, shape, c.Arch)
	}
	m, err := model.Generate(c, seed)
	if err != nil {
		return err
	}
	m.Source = fmt.Sprintf("tandem-random-%s-seed%d", shape, seed)
	m.Vocab = vocab
	if o.HF {
		return writeHFDir(path, m, dtype, o.Tokenizer)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("%s: %w", path, cerr)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	if strings.EqualFold(filepath.Ext(path), ".bin") {
		if dtype != "" && !strings.EqualFold(dtype, "f32") {
			return fmt.Errorf("%s: llama2.c checkpoints are fp32 only, not %s", path, dtype)
		}
		err = model.WriteLlama2C(w, m)
	} else {
		if dtype == "" {
			dtype = "f32"
		}
		q, qerr := model.ParseQuant(dtype)
		if qerr != nil {
			return qerr
		}
		q.Progress = o.Progress
		err = model.WriteGGUFQuant(w, m, q)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeHFDir writes m as a Hugging Face directory with the tokenizer
// copied in (tokenizer.json and tokenizer_config.json, or a llama2.c
// tokenizer.bin).
func writeHFDir(dir string, m *model.Model, dtype, tok string) error {
	// Random weights have no order of their own: take them as rotate-half,
	// the order of HF checkpoints.
	m.Config.Rope = model.RopeHalf
	if err := m.Init(); err != nil {
		return err
	}
	if m.Vocab != nil {
		m.BOS = m.Vocab.BOS
		if m.Vocab.EOS >= 0 {
			m.EOS = []int32{m.Vocab.EOS}
		}
	}
	if err := model.WriteHF(dir, m, dtype, hfShardBytes); err != nil {
		return err
	}
	if tok == "" {
		return nil
	}
	var files [][2]string
	switch st, err := os.Stat(tok); {
	case err != nil:
		return err
	case st.IsDir():
		files = [][2]string{{filepath.Join(tok, "tokenizer.json"), "tokenizer.json"}, {filepath.Join(tok, "tokenizer_config.json"), "tokenizer_config.json"}}
	case strings.HasSuffix(tok, ".json"):
		files = [][2]string{{tok, "tokenizer.json"}, {filepath.Join(filepath.Dir(tok), "tokenizer_config.json"), "tokenizer_config.json"}}
	case strings.HasSuffix(tok, ".bin"):
		files = [][2]string{{tok, "tokenizer.bin"}}
	default:
		return fmt.Errorf("%s: Hugging Face directories take a tokenizer.json or a llama2.c tokenizer .bin", tok)
	}
	for i, f := range files {
		b, err := readBounded(f[0], maxVocabFile)
		if err != nil {
			if i > 0 && errors.Is(err, os.ErrNotExist) {
				continue // tokenizer_config.json is optional
			}
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f[1]), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// hfShardBytes is the shard size of generated directories: 2 GiB, the
// size at which transformers' save_pretrained default (5 GB) would still
// keep one file for the shapes Tandem generates except the largest.
var hfShardBytes int64 = 2 << 30

// QuantizeModelFile reads any model LoadModel reads (GGUF, a Hugging Face
// directory, a llama2.c checkpoint) and writes it to out as GGUF of file
// type quant (model.QuantNames), tokenizer and chat template included, as
// llama.cpp's convert_hf_to_gguf.py followed by llama-quantize would.
func QuantizeModelFile(in, out, quant string) error {
	return Quantize(in, out, QuantizeOptions{Type: quant})
}

// QuantizeOptions are QuantizeModel's choices beyond the paths.
type QuantizeOptions struct {
	Type string // model.QuantNames
	// ChatTemplate, when set, is the chat template source written in
	// place of the input's own.
	ChatTemplate string
	// Progress, when set, is called as the layers are encoded.
	Progress func(done, total int)
}

// Quantize is QuantizeModelFile with options.
func Quantize(in, out string, o QuantizeOptions) error {
	quant := o.Type
	q, err := model.ParseQuant(quant)
	if err != nil {
		return err
	}
	q.Progress = o.Progress
	l, err := LoadModel(in)
	if err != nil {
		return err
	}
	m := l.Model
	if m.Vocab == nil {
		tok := in
		if st, err := os.Stat(in); err == nil && !st.IsDir() {
			tok = filepath.Dir(in)
		}
		// The tokenizer beside the weights: tokenizer.json, else the
		// llama2.c tokenizer LoadModel used.
		if _, err := os.Stat(filepath.Join(tok, "tokenizer.json")); err != nil {
			if tok, err = findLlama2CTokenizer(tok, l.Path); err != nil {
				return err
			}
		}
		if m.Vocab, err = VocabFromFile(tok); err != nil {
			return err
		}
		if len(m.Vocab.Tokens) > m.Config.Vocab {
			return fmt.Errorf("%s: tokenizer has %d tokens, the embedding %d rows", in, len(m.Vocab.Tokens), m.Config.Vocab)
		}
		PadVocab(m.Vocab, m.Config.Vocab)
	}
	if o.ChatTemplate != "" {
		m.Vocab.ChatTemplate = o.ChatTemplate
	}
	if m.Source == "" || strings.ContainsRune(m.Source, os.PathSeparator) {
		m.Source = strings.TrimSuffix(filepath.Base(l.Path), filepath.Ext(l.Path))
	}
	return writeFileAtomic(out, func(w *bufio.Writer) error { return model.WriteGGUFQuant(w, m, q) })
}

// writeFileAtomic writes path through a temporary file renamed into
// place, so an interrupted run never leaves a truncated model behind.
func writeFileAtomic(path string, fn func(*bufio.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	if err = fn(w); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err = w.Flush(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
