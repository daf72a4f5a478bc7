package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// polishHelp makes every command's help read well: backticks in flag help
// are quotes (pflag's UnquoteUsage would take `x` for the value's name), an
// empty list shows no "(default [])", a mistyped flag gets the nearest
// real one suggested, the serving commands get their flags in groups with
// examples, and bench subcommands list only the shared bench flags they
// read.
func polishHelp(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.LocalNonPersistentFlags(), c.PersistentFlags(), c.Flags()} {
			fs.VisitAll(tidyFlag)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	root.SetFlagErrorFunc(suggestFlag)
	for _, c := range root.Commands() {
		switch c.Name() {
		case "serve", "frontend", "worker", "doctor", "planner":
			if c.Example == "" {
				c.Example = helpExamples[c.Name()]
			}
			c.SetUsageFunc(groupedUsage)
		case "bench":
			for _, sub := range c.Commands() {
				if keep, ok := benchInherited[sub.Name()]; ok {
					onlyInherited(sub, keep)
				}
			}
		}
	}
}

func tidyFlag(f *pflag.Flag) {
	f.Usage = strings.ReplaceAll(f.Usage, "`", "'")
	// pflag knows "[]" is the zero value of these three list types only;
	// for the others (float64Slice, durationSlice, ...) an empty default
	// must be "" for it to print no "(default [])".
	switch f.Value.Type() {
	case "intSlice", "stringSlice", "stringArray":
	default:
		if f.DefValue == "[]" {
			f.DefValue = ""
		}
	}
}

// suggestFlag adds the nearest flag name to an unknown-flag error, as cobra
// does for mistyped subcommands.
func suggestFlag(c *cobra.Command, err error) error {
	msg := err.Error()
	const prefix = "unknown flag: --"
	i := strings.Index(msg, prefix)
	if i < 0 {
		return err
	}
	bad := strings.Fields(msg[i+len(prefix):])
	if len(bad) == 0 {
		return err
	}
	name, _, _ := strings.Cut(bad[0], "=")
	best, bestD := "", 1<<30
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := editDistance(name, f.Name)
		if strings.HasPrefix(f.Name, name) || strings.HasPrefix(name, f.Name) {
			d = min(d, 1)
		}
		if d < bestD || d == bestD && f.Name < best {
			best, bestD = f.Name, d
		}
	})
	if best == "" || bestD > max(2, len(name)/3) {
		return fmt.Errorf("%w (tandem %s --help lists the flags)", err, c.Name())
	}
	return fmt.Errorf("%w\n\nDid you mean --%s?", err, best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// benchInherited are, per bench subcommand that reads few of the shared
// bench flags, those it reads; its help hides the others.
var benchInherited = map[string][]string{
	"compare": {"slo", "cost-per-hour", "out", "log-level"},
	"profile": {"url", "label", "api-key", "model", "serve", "seed", "timeout", "out", "log-level"},
}

func onlyInherited(c *cobra.Command, keep []string) {
	parent := c.HelpFunc()
	c.SetHelpFunc(func(c *cobra.Command, args []string) {
		c.InheritedFlags().VisitAll(func(f *pflag.Flag) {
			for _, k := range keep {
				if f.Name == k {
					return
				}
			}
			f.Hidden = true
		})
		parent(c, args)
	})
}

var helpExamples = map[string]string{
	"serve": `  tandem serve                                             # 2 mocker workers on http://127.0.0.1:8000/v1
  tandem serve --router-mode kv --workers 4                # KV-cache-aware routing
  tandem serve --engine native --model /tmp/tiny-qwen3.gguf  # a real model on CPU (README: native quick start)
  tandem serve --prefill-workers 1 --decode-workers 2 --disagg auto --router-mode kv
  tandem serve --engine upstream --model DIR --upstream http://vllm:8000`,
	"frontend": `  tandem frontend --router-mode kv                         # workers found through file discovery
  tandem frontend --discovery etcd --etcd-endpoints http://etcd:2379 --http-addr 0.0.0.0:8000`,
	"worker": `  tandem worker --id w1                                    # a mocker worker the frontend finds
  tandem worker --engine native --model /tmp/tiny-qwen3.gguf --id w2
  tandem worker --engine mocker --openai-addr 127.0.0.1:8100  # one vLLM-like server, no frontend`,
	"doctor": `  tandem doctor --frontend http://127.0.0.1:8000 --expect-workers 2
  tandem doctor --discovery etcd --etcd-endpoints http://etcd:2379 --expect-workers /prefill=1,/decode=2 --json`,
	"planner": `  tandem planner simulate                                  # the built-in trace, every policy side by side
  tandem planner --frontend-metrics http://127.0.0.1:8000/metrics --actuator local --local-worker 'agg=worker --id {id}' --dry-run
  tandem planner --frontend-metrics http://frontend:8000/metrics --name my-deployment   # in a pod: scales a TandemDeployment`,
}

// flagGroups name a flag's section in grouped help: the first group with
// a prefix (or an exact name) the flag's name starts with.
var flagGroups = []struct {
	name     string
	prefixes []string
}{
	{"Security", []string{"api-key", "mtls-", "tls-", "protect-", "nats-tls-", "nats-token", "metrics-key", "metrics-ca", "planner-key", "etcd-ca", "etcd-cert", "etcd-key", "etcd-user"}},
	{"Engine", []string{"engine", "model", "served-model-name", "chat-template", "threads", "kv-cache-dtype", "block-size", "kv-capacity-tokens", "max-num-", "kv-bytes-per-token", "speedup", "instant", "seed", "max-natural-tokens", "timing", "mocker-", "workers"}},
	{"Upstream engine (--engine upstream)", []string{"upstream"}},
	{"Routing", []string{"router-", "index-max-blocks", "on-missing-kv-events", "kv-events-timeout", "kv-events-bind", "kv-events-allow"}},
	{"KV events and KV transfer", []string{"kv-events", "kv-transfer", "kv-"}},
	{"Disaggregation", []string{"disagg", "prefill-", "decode-", "role", "transfer-"}},
	{"HTTP and limits", []string{"http-", "max-", "queue-", "body-", "stuck-after", "first-token-timeout", "migration-limit", "drain-timeout", "access-log", "openai-addr"}},
	{"Cluster: discovery, event plane, request plane", []string{"discovery", "etcd", "kube", "nats", "event-plane", "rp-", "request-plane", "id", "lease-", "namespace", "advertise"}},
	{"Planner and autoscaling", []string{"autoscale", "pool", "planner", "ttft-target", "itl-target", "policy", "interval", "profile", "learn", "actuator", "local-", "deployment", "name", "frontend-metrics", "worker-metrics", "dry-run", "down-cooldown", "up-cooldown", "holt-", "predictor", "quantile", "startup"}},
	{"Observability", []string{"trace", "otlp", "log-", "metrics-", "config", "json", "output"}},
}

func flagGroup(name string) string {
	for _, g := range flagGroups {
		for _, p := range g.prefixes {
			if name == p || strings.HasPrefix(name, p+"-") || strings.HasSuffix(p, "-") && strings.HasPrefix(name, p) {
				return g.name
			}
		}
	}
	return "Other"
}

// groupedUsage is the usage of the serving commands: examples, then the
// flags in sections (flagGroups), then the global ones.
func groupedUsage(c *cobra.Command) error {
	w := c.OutOrStderr()
	fmt.Fprintf(w, "Usage:\n  %s\n", c.UseLine())
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "  %s [command]\n", c.CommandPath())
	}
	if c.Example != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", c.Example)
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintln(w, "\nCommands:")
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				fmt.Fprintf(w, "  %-12s %s\n", sub.Name(), sub.Short)
			}
		}
	}
	sets := map[string]*pflag.FlagSet{}
	c.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" {
			return
		}
		g := flagGroup(f.Name)
		if sets[g] == nil {
			sets[g] = pflag.NewFlagSet(g, pflag.ContinueOnError)
		}
		sets[g].AddFlag(f)
	})
	order := make([]string, 0, len(flagGroups)+1)
	for _, g := range flagGroups {
		order = append(order, g.name)
	}
	order = append(order, "Other")
	for _, g := range order {
		if fs := sets[g]; fs != nil {
			fmt.Fprintf(w, "\n%s:\n%s", g, fs.FlagUsagesWrapped(0))
		}
	}
	writeSection(w, "Global Flags", c.InheritedFlags())
	fmt.Fprintf(w, "\n  -h, --help   help for %s\n", c.Name())
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\nUse \"%s [command] --help\" for more about a command.\n", c.CommandPath())
	}
	return nil
}

func writeSection(w io.Writer, title string, fs *pflag.FlagSet) {
	if fs.HasAvailableFlags() {
		fmt.Fprintf(w, "\n%s:\n%s", title, fs.FlagUsagesWrapped(0))
	}
}
