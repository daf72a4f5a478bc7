package process

import (
	"fmt"
	"math"
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
	// Range-checked before the conversion: a float beyond int64 converts
	// to an undefined value, not an error.
	if v*float64(mult) >= math.MaxInt64 {
		return fmt.Errorf("%q is too large (at most %s)", s, FormatBytes(math.MaxInt64))
	}
	*b = ByteSize(v * float64(mult))
	return nil
}

// FormatBytes writes n for people: GiB, MiB or KiB with a fraction, or
// bytes.
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
