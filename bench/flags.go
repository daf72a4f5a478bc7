package bench

import "github.com/spf13/pflag"

// AddHonorEOSFlag registers --honor-eos, one definition for every workload
// that sends ignore_eos by default (synthetic, sweep, dataset, multi-turn,
// trace): set, the model may stop early and outputs can be shorter than
// asked.
func AddHonorEOSFlag(fs *pflag.FlagSet, p *bool) {
	fs.BoolVar(p, "honor-eos", false, "let the model stop early (default sends ignore_eos, so outputs are as long as asked: --output, or the trace's; OpenAI itself rejects ignore_eos)")
}
