package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/engine/native"
	"github.com/tandemllm/tandem/engine/native/model"
)

func newModelCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "model", Short: "Model files: generate random-weight models, quantize to GGUF"}
	var shape, out, dtype, tok, format string
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
			if format == "hf" && dtype == "f32" && !cmd.Flags().Changed("dtype") {
				dtype = "bf16"
			}
			o := native.GenOptions{Shape: shape, Seed: seed, DType: dtype, Tokenizer: tok, HF: format == "hf"}
			if err := native.GenerateModel(out, o); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (shape %s, seed %d, %s, %s)\n", out, shape, seed, format, dtype)
			return nil
		},
	}
	f := gen.Flags()
	f.StringVar(&shape, "shape", "15m", strings.Join(model.ShapeNames(), ", "))
	f.Uint64Var(&seed, "seed", 1, "weights seed")
	f.StringVar(&out, "out", "", "output file (.bin: llama2.c fp32; otherwise GGUF) or directory (--format hf)")
	f.StringVar(&dtype, "dtype", "f32", "GGUF file type ("+strings.Join(model.QuantNames(), ", ")+") or safetensors dtype (f32, f16, bf16; hf default bf16)")
	f.StringVar(&tok, "tokenizer", "", "tokenizer to carry: tokenizer.json (or its directory), SentencePiece tokenizer.model, llama2.c tokenizer .bin")
	f.StringVar(&format, "format", "gguf", "gguf or hf (config.json + safetensors)")
	cmd.AddCommand(gen)

	var in, qout, qtype string
	quant := &cobra.Command{
		Use:   "quantize",
		Short: "Convert a model (GGUF, Hugging Face directory, llama2.c) to GGUF of a llama.cpp file type",
		Long: `Writes GGUF in llama.cpp's block layouts, with llama-quantize's per-tensor type
choice for the mixed types (Q4_K_M: Q6_K output and, in the layers llama.cpp's
use_more_bits picks, Q6_K attn_v and ffn_down). The tokenizer goes into the file.`,
		Example: `  tandem model quantize --in /tmp/qwen3-0.6b --type q4_k_m --out /tmp/qwen3-0.6b-q4_k_m.gguf`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if in == "" || qout == "" {
				return fmt.Errorf("--in and --out are required")
			}
			if err := native.QuantizeModelFile(in, qout, qtype); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%s)\n", qout, qtype)
			return nil
		},
	}
	qf := quant.Flags()
	qf.StringVar(&in, "in", "", "model file or directory")
	qf.StringVar(&qout, "out", "", "output .gguf")
	qf.StringVar(&qtype, "type", "q4_k_m", strings.Join(model.QuantNames(), ", "))
	cmd.AddCommand(quant)
	return cmd
}
