package main

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// namesWithManyMeanings are the flag names that denote different settings
// on different commands, each with its own type or default; every other
// name is one setting wherever it appears. An entry says why the name is
// not one setting; one that no longer differs fails the test (delete it).
var namesWithManyMeanings = map[string]string{
	"block-size":         "the engine's KV block size (serve, worker, bench profile) vs the tokens per Mooncake hash id (bench trace)",
	"input":              "each bench workload's own prompt-length distribution, defaulting to the seed test it reproduces",
	"output":             "each bench workload's max_tokens (a distribution or a count) vs doctor's report format",
	"kv-capacity-tokens": "a served mocker's KV size vs the seed GPU's size that bench prefix-reuse --start-server calibrates to",
	"max-inflight":       "the server's admission bound (serve, frontend) vs the bench client's open-loop bound",
	"prefix-words":       "each bench workload's prefix length, defaulting to the seed test it reproduces",
	"prefixes":           "each bench workload's prefix count, defaulting to the seed test it reproduces",
	"tail-words":         "each bench workload's tail length, defaulting to the seed test it reproduces",
	"role":               "a worker's role (aggregated, prefill, decode) vs the role a certificate is issued for",
	"seed":               "the mocker's generated-text seed vs the bench's prompt and arrival seed",
	"speedup":            "the mocker's time divisor (serve, worker, bench prefix-reuse) and bench trace's timestamp divisor vs planner simulate's compressed replay of a trace's hour",
	"timeout":            "the bench's per-request bound vs doctor's bound on each network call",
}

// TestFlagConsistency: across every command of the tree, one flag name has
// one type and one default (unless namesWithManyMeanings says why not), so
// a flag learnt on one command means the same on the others and a --config
// file's key reads the same everywhere.
func TestFlagConsistency(t *testing.T) {
	// A default taken from the environment must be the same everywhere too.
	t.Setenv("KUBECONFIG", "/kubeconfig-of-the-flag-test")
	seen := map[string]map[string][]string{} // name → "type default" → commands
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if seen[f.Name] == nil {
				seen[f.Name] = map[string][]string{}
			}
			k := fmt.Sprintf("%s %q", f.Value.Type(), f.DefValue)
			seen[f.Name][k] = append(seen[f.Name][k], c.CommandPath())
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	var bad []string
	for name, defs := range seen {
		_, allowed := namesWithManyMeanings[name]
		if len(defs) < 2 {
			if allowed {
				bad = append(bad, fmt.Sprintf("--%s is one setting now: delete it from namesWithManyMeanings", name))
			}
			continue
		}
		if allowed {
			continue
		}
		var ds []string
		for k, cmds := range defs {
			ds = append(ds, fmt.Sprintf("%s in %s", k, strings.Join(cmds, ", ")))
		}
		sort.Strings(ds)
		bad = append(bad, fmt.Sprintf("--%s has %d definitions: %s", name, len(defs), strings.Join(ds, "; ")))
	}
	for name := range namesWithManyMeanings {
		if seen[name] == nil {
			bad = append(bad, fmt.Sprintf("--%s is no flag now: delete it from namesWithManyMeanings", name))
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}
