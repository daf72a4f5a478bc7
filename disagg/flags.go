package disagg

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// The disaggregation flags, one definition each for every command that
// has them (serve, frontend, planner simulate). They fill pointers
// because each command keeps them in its own configuration.

// AddModeFlag registers --disagg (default auto) on p. A boolean spelling
// is accepted too: true is always, false is never (planner simulate's
// --disagg was a boolean).
func AddModeFlag(fs *pflag.FlagSet, p *string) {
	*p = string(Auto)
	fs.Var((*modeValue)(p), "disagg", "disaggregated prefill: auto (price local vs remote per request), always or never (true: always, false: never)")
}

// AddLegTimeoutFlag registers --disagg-leg-timeout (default 0).
func AddLegTimeoutFlag(fs *pflag.FlagSet, p *time.Duration) {
	fs.DurationVar(p, "disagg-leg-timeout", 0, fmt.Sprintf("bound on a remote prefill leg (prefill + KV transfer); past it the request prefills locally (0: --transfer-timeout where the command has it, else %v)", DefaultLegTimeout))
}

// AddInterferenceWeightFlag registers --disagg-interference-weight
// (default 1).
func AddInterferenceWeightFlag(fs *pflag.FlagSet, p *float64) {
	fs.Float64Var(p, "disagg-interference-weight", 1, "weight of each running decode a local prefill would stall, in the disagg decider's cost")
}

// modeValue is --disagg: a Mode, checked when the flag is parsed.
type modeValue string

func (m *modeValue) String() string { return string(*m) }
func (m *modeValue) Type() string   { return "string" }

func (m *modeValue) Set(s string) error {
	v := strings.TrimSpace(s)
	if b, err := strconv.ParseBool(v); err == nil {
		v = string(Never)
		if b {
			v = string(Always)
		}
	}
	if _, err := ParseMode(v); err != nil || v == "" {
		return fmt.Errorf("%q: want auto, always or never (true: always, false: never)", s)
	}
	*m = modeValue(v)
	return nil
}

// Settings is a routing command's part in disaggregated prefill, the same
// in every command that routes (tandem frontend, tandem serve).
type Settings struct {
	// Mode is --disagg: auto (price local vs remote per request), always
	// or never.
	Mode string
	// InterferenceWeight is the decider's w (--disagg-interference-weight;
	// 0: its default).
	InterferenceWeight float64
	// LegTimeout bounds a remote prefill leg, transfer included
	// (--disagg-leg-timeout; 0: DefaultLegTimeout).
	LegTimeout time.Duration
}

// DefaultSettings returns the flag defaults.
func DefaultSettings() Settings {
	return Settings{Mode: string(Auto), InterferenceWeight: 1}
}

// AddFlags registers --disagg, --disagg-interference-weight and
// --disagg-leg-timeout, each from its one definition above.
func (c *Settings) AddFlags(fs *pflag.FlagSet) {
	AddModeFlag(fs, &c.Mode)
	AddInterferenceWeightFlag(fs, &c.InterferenceWeight)
	AddLegTimeoutFlag(fs, &c.LegTimeout)
}
