package kvtransfer

import (
	"context"
	"net"
	"time"

	"github.com/spf13/pflag"

	"github.com/tandemllm/tandem/process"
)

// Settings is a worker's KV transfer node as every command that runs
// prefill or decode workers configures it (tandem worker, tandem serve).
type Settings struct {
	// Budget bounds the worker's KV staging memory in bytes
	// (--transfer-budget; 0: DefaultBudget).
	Budget int64
	// Timeout bounds one KV transfer (--transfer-timeout; 0:
	// DefaultTimeout).
	Timeout time.Duration
	// Dial, if set, opens the node's connections to peers (nil: a
	// net.Dialer): a hook for sockets that must live elsewhere, or a link
	// shaped the way a real network is (tandem doctor's slow-link test).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Listen, if set, creates the node's listener (nil: net.Listen), e.g.
	// to put it in another network namespace (tests).
	Listen func(network, addr string) (net.Listener, error)
}

// AddFlags registers --transfer-budget and --transfer-timeout, their help
// led by what each command says of when they apply (budgetFor,
// timeoutFor).
func (s *Settings) AddFlags(fs *pflag.FlagSet, budgetFor, timeoutFor string) {
	s.Budget = DefaultBudget
	fs.Var((*process.ByteSize)(&s.Budget), "transfer-budget", budgetFor+"KV transfer staging memory (e.g. 512MiB, 1GiB, bytes)")
	fs.DurationVar(&s.Timeout, "transfer-timeout", DefaultTimeout, timeoutFor+"bound on one KV transfer; a failed transfer falls back to local prefill")
}
