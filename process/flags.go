package process

import (
	"fmt"
	"strconv"
	"strings"
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

// ByteSize is a flag holding a byte count with an optional binary or
// decimal unit suffix.
type ByteSize int64

func (b *ByteSize) String() string { return strconv.FormatInt(int64(*b), 10) }
func (b *ByteSize) Type() string   { return "bytes" }

func (b *ByteSize) Set(s string) error {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	mult := int64(1)
	num := strings.TrimSpace(s)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 {
		return fmt.Errorf("%q is not a positive size (e.g. 512MiB)", s)
	}
	*b = ByteSize(v * float64(mult))
	return nil
}
