package process

import (
	"time"

	"github.com/spf13/pflag"
)

// DefaultDrainTimeout is --drain-timeout's default.
const DefaultDrainTimeout = 30 * time.Second

// AddDrainFlag registers --drain-timeout, the one definition every command
// that drains (serve, frontend, worker) shares: d's current value is the
// default, DefaultDrainTimeout if it is zero.
func AddDrainFlag(fs *pflag.FlagSet, d *time.Duration) {
	if *d == 0 {
		*d = DefaultDrainTimeout
	}
	fs.DurationVar(d, "drain-timeout", *d, "how long in-flight requests may take to finish on SIGTERM/Ctrl-C")
}
