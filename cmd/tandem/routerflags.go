package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/kvevents"
	"github.com/tandemllm/tandem/router"
)

// routerFlags are the routing flags shared by every command that routes
// (serve, frontend).
type routerFlags struct {
	mode      string
	cost      string
	onMissing string
	allow     []string
	kv        router.KVConfig
}

func (r *routerFlags) register(cmd *cobra.Command, defaultMode string) {
	f := cmd.Flags()
	f.StringVar(&r.mode, "router-mode", defaultMode, "routing policy: "+router.Modes)
	f.StringVar(&r.cost, "router-cost", string(router.CostTTFT), "kv cost function: ttft (predicted time to first token from each worker's timing model, the default), tandem (weighted blocks, a cached prefix counted as resident) or dynamo (Dynamo's weighted blocks, as a baseline)")
	f.Float64Var(&r.kv.OverlapWeight, "router-kv-overlap-weight", router.DefaultOverlapWeight, "kv: weight of prefill blocks against decode blocks in the weighted costs (tandem, dynamo, and ttft's fallback for a drifting worker)")
	f.Float64Var(&r.kv.Temperature, "router-temperature", 0, "kv: softmax sampling temperature over costs (0: cheapest wins)")
	f.IntVar(&r.kv.BlockSize, "router-block-size", router.DefaultKVBlockSize, "kv: the router's block size in tokens; engine block sizes must be multiples")
	f.IntVar(&r.kv.IndexMaxBlocks, "index-max-blocks", 0, "kv: bound on indexed (worker, block) residences, least recently used pruned first (0: default)")
	f.DurationVar(&r.kv.ApproxTTL, "router-ttl", router.DefaultApproxTTL, "kv-approx: how long a routing decision is remembered")
	f.DurationVar(&r.kv.KVEventsTimeout, "kv-events-timeout", router.DefaultKVEventsTimeout, "kv: a worker that computed full blocks and sent no BlockStored for this long raises kv_events_missing")
	f.StringVar(&r.kv.Bind, "kv-events-bind", "", "kv: bind one ZMQ SUB socket here (tcp://host:port) for publishers that dial in (vLLM with a host in its endpoint, llm-d's simulators); a worker whose KV event endpoint is topic:NAME is followed on it by that topic")
	f.StringSliceVar(&r.allow, "kv-events-allow", nil, "kv: source networks (CIDRs or addresses) whose publishers --kv-events-bind accepts; others are closed at accept. Without it --kv-events-bind must be a loopback address (ZMQ authenticates nobody)")
	f.StringVar(&r.onMissing, "on-missing-kv-events", string(router.MissingFallback), "kv: for a worker without events: fallback (route it by approximation) or fail (stop routing to it)")
}

// apply sets a component's router mode and KV configuration from the flags.
func (r *routerFlags) apply(mode *string, kv *router.KVConfig) error {
	cfg := r.kv
	var err error
	if cfg.Cost, err = router.ParseCostModel(r.cost); err != nil {
		return fmt.Errorf("--router-cost: %w", err)
	}
	if cfg.OnMissing, err = router.ParseOnMissing(r.onMissing); err != nil {
		return fmt.Errorf("--on-missing-kv-events: %w", err)
	}
	if cfg.BindAllow, err = kvevents.ParseAllow(r.allow); err != nil {
		return fmt.Errorf("--kv-events-allow: %w", err)
	}
	*mode, *kv = r.mode, cfg
	return nil
}

// routerDescription is a banner's router line: the mode, and for the kv
// mode the cost function that picks among workers.
func routerDescription(mode string, kv router.KVConfig) string {
	if mode != "kv" {
		return mode
	}
	cost := kv.Cost
	if cost == "" {
		cost = router.CostTTFT
	}
	return fmt.Sprintf("%s (cost %s)", mode, cost)
}
