package native

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

		"github.com/tandemllm/tandem/engine/native/model"
)

// GenerateModelFile writes a deterministic random-weight model of a named
// shape (model.ShapeNames: tiny, 15m, 42m, 110m, 0.6b) for `tandem model
// gen`. A path ending in .bin gets a llama2.c checkpoint (fp32 llama shapes
// only); anything else gets GGUF with matrices in dtype ("f32", "f16" or
// "q8_0"; "" means f32). The same shape and seed always give the same bytes.
// GGUF files carry no tokenizer: random weights produce token ids only.
func GenerateModelFile(path, shape string, seed uint64, dtype string) (err error) {
	c, err := model.Shape(shape)
	if err != nil {
		return err
	}
	if strings.EqualFold(filepath.Ext(path), ".bin") && (c.Arch != "llama" || c.QDim() != c.Dim) {
		return fmt.Errorf("%s: shape %s (%s) does not fit the llama2.c format; write .gguf", path, shape, c.Arch)
	}
	m, err := model.Generate(c, seed)
	if err != nil {
		return err
	}
	m.Source = fmt.Sprintf("tandem-random-%s-seed%d", shape, seed)
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
