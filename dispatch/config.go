package dispatch

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/tandemllm/tandem/router"
)

// Config is a request's life past admission: retries, the first-token
// bound, migration and the stuck threshold.
type Config struct {
	// MaxRetries is how many other workers a request is tried on when its
	// worker fails before streaming any token.
	MaxRetries int
	// MigrationLimit is how many times a stream whose worker fails after
	// its first token is continued on another worker, with the prompt plus
	// the tokens already sent (Dynamo's --migration-limit; 0: never, the
	// client gets the stream_interrupted error event).
	MigrationLimit int
	// FirstTokenTimeout bounds the wait for a request's first token on
	// one worker (--first-token-timeout; 0: no bound); past it the request
	// is tried on another worker (--max-retries), else answered 504.
	FirstTokenTimeout time.Duration
	// StuckAfter is how long a worker may hold requests without producing
	// a token before the router skips it (--stuck-after; 0: never).
	StuckAfter time.Duration
}

// DefaultConfig returns the defaults the flags start from.
func DefaultConfig() Config {
	return Config{MaxRetries: 2, FirstTokenTimeout: 5 * time.Minute, StuckAfter: router.DefaultStuckAfter}
}

// AddFlags registers the configuration's flags on fs, with c's values as
// their defaults.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&c.MaxRetries, "max-retries", c.MaxRetries, "other workers to try when a worker fails before the first token")
	fs.IntVar(&c.MigrationLimit, "migration-limit", c.MigrationLimit, "times a stream whose worker fails after its first token continues on another worker with the prompt plus the tokens already sent (0: never; Dynamo's --migration-limit)")
	fs.DurationVar(&c.StuckAfter, "stuck-after", c.StuckAfter, "a worker holding requests without producing a token this long is reported stuck and skipped (0: never)")
	fs.DurationVar(&c.FirstTokenTimeout, "first-token-timeout", c.FirstTokenTimeout, "bound on waiting for a request's first token on one worker; past it the request is tried elsewhere, else 504 (0: no bound)")
}
