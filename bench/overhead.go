package bench

import (
	"context"
	"errors"
	"fmt"
)

// RunOverhead is the seed's frontend-overhead experiment (§2): the same
// synthetic requests sent straight to a worker (the first target) and
// through the frontend (the second), interleaved request by request, at
// each concurrency level. Prompts are salted per target: both targets end
// in the same engine, and an unsalted request would find its twin's
// prefix in the cache and flatter whichever target came second.
func RunOverhead(ctx context.Context, wl Synthetic, o Options, levels []int) ([]*Result, error) {
	if len(o.Targets) != 2 {
		return nil, errors.New("frontend-overhead needs exactly two --url values: the worker's own endpoint, then the frontend's")
	}
	if len(levels) == 0 {
		levels = []int{1}
	}
	wl.SaltTargets = true
	wl.Scenario = ScenarioFrontendOverhead
	o.Order, o.Rate = Alternate, 0
	var out []*Result
	for k, c := range levels {
		if c < 1 {
			return out, fmt.Errorf("concurrency level %d must be at least 1", c)
		}
		if ctx.Err() != nil {
			break
		}
		o.Concurrency, o.Run, o.LabelSuffix = c, k+1, fmt.Sprintf(" c=%d", c)
		// Each level draws fresh requests, so a level never replays the
		// previous one's prompts into a warm cache.
		lw := wl
		lw.Seed += uint64(k) * 1_000_003
		res, err := Run(ctx, &lw, o)
		if err != nil {
			return out, fmt.Errorf("concurrency %d: %w", c, err)
		}
		out = append(out, res)
	}
	return out, nil
}
