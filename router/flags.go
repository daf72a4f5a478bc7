package router

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/tandemllm/tandem/planes/kvevents/event"
)

// Settings are the routing flags of every command that routes (serve,
// frontend): the policy and the KV router's configuration. Resolve parses
// the flags that are kept as text until then.
type Settings struct {
	// Mode is --router-mode; its value when AddFlags is called is the
	// default.
	Mode string
	// KV is the kv modes' configuration; Resolve fills Cost, OnMissing
	// and BindAllow from their flags.
	KV KVConfig

	cost, onMissing string
	allow           []string
}

// AddFlags registers the routing flags.
func (s *Settings) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&s.Mode, "router-mode", s.Mode, "routing policy: "+Modes)
	f.StringVar(&s.cost, "router-cost", string(CostTTFT), "kv cost function: ttft (predicted time to first token from each worker's timing model, the default), tandem (weighted blocks, a cached prefix counted as resident) or dynamo (Dynamo's weighted blocks, as a baseline)")
	f.Float64Var(&s.KV.OverlapWeight, "router-kv-overlap-weight", DefaultOverlapWeight, "kv: weight of prefill blocks against decode blocks in the weighted costs (tandem, dynamo, and ttft's fallback for a drifting worker)")
	f.Float64Var(&s.KV.Temperature, "router-temperature", 0, "kv: softmax sampling temperature over costs (0: cheapest wins)")
	f.IntVar(&s.KV.BlockSize, "router-block-size", DefaultKVBlockSize, "kv: the router's block size in tokens; engine block sizes must be multiples")
	f.IntVar(&s.KV.IndexMaxBlocks, "index-max-blocks", 0, "kv: bound on indexed (worker, block) residences, least recently used pruned first (0: default)")
	f.DurationVar(&s.KV.ApproxTTL, "router-ttl", DefaultApproxTTL, "kv-approx: how long a routing decision is remembered")
	f.DurationVar(&s.KV.KVEventsTimeout, "kv-events-timeout", DefaultKVEventsTimeout, "kv: a worker that computed full blocks and sent no BlockStored for this long raises kv_events_missing")
	f.StringVar(&s.KV.Bind, "kv-events-bind", "", "kv: bind one ZMQ SUB socket here (tcp://host:port) for publishers that dial in (vLLM with a host in its endpoint, llm-d's simulators); a worker whose KV event endpoint is topic:NAME is followed on it by that topic")
	f.StringSliceVar(&s.allow, "kv-events-allow", nil, "kv: source networks (CIDRs or addresses) whose publishers --kv-events-bind accepts; others are closed at accept. Without it --kv-events-bind must be a loopback address (ZMQ authenticates nobody)")
	f.StringVar(&s.onMissing, "on-missing-kv-events", string(MissingFallback), "kv: for a worker without events: fallback (route it by approximation) or fail (stop routing to it)")
}

// Resolve parses --router-cost, --on-missing-kv-events and
// --kv-events-allow into KV, naming the flag of a bad value.
func (s *Settings) Resolve() error {
	var err error
	if s.KV.Cost, err = ParseCostModel(s.cost); err != nil {
		return fmt.Errorf("--router-cost: %w", err)
	}
	if s.KV.OnMissing, err = ParseOnMissing(s.onMissing); err != nil {
		return fmt.Errorf("--on-missing-kv-events: %w", err)
	}
	if s.KV.BindAllow, err = event.ParseAllow(s.allow); err != nil {
		return fmt.Errorf("--kv-events-allow: %w", err)
	}
	return nil
}

// Describe is a banner's router line: the mode, and for the kv mode the
// cost function that picks among workers.
func Describe(mode string, kv KVConfig) string {
	if mode != "kv" {
		return mode
	}
	cost := kv.Cost
	if cost == "" {
		cost = CostTTFT
	}
	return fmt.Sprintf("%s (cost %s)", mode, cost)
}
