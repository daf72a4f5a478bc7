package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/engine/native"
)

func newModelCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "model", Short: "Model files: generate deterministic random-weight models"}
	var shape, out, dtype string
	var seed uint64
	gen := &cobra.Command{
		Use:   "gen",
		Short: "Write a deterministic random-weight model (llama2.c .bin, or GGUF for any other extension)",
		Example: `  tandem model gen --shape 15m --seed 1 --out /tmp/15m.bin
  tandem model gen --shape 110m --seed 1 --dtype q8_0 --out /tmp/110m-q8.gguf`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return fmt.Errorf("--out is required")
			}
			if err := native.GenerateModelFile(out, shape, seed, dtype); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (shape %s, seed %d, %s)\n", out, shape, seed, dtype)
			return nil
		},
	}
	f := gen.Flags()
	f.StringVar(&shape, "shape", "15m", "tiny, 15m, 42m, 110m or 0.6b")
	f.Uint64Var(&seed, "seed", 1, "weights seed")
	f.StringVar(&out, "out", "", "output file (.bin: llama2.c fp32; otherwise GGUF)")
	f.StringVar(&dtype, "dtype", "f32", "GGUF tensor type: f32, f16 or q8_0")
	cmd.AddCommand(gen)
	return cmd
}
