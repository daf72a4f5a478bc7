package router

import (
	"context"
	"fmt"
)

// Modes lists the values of --router-mode.
const Modes = "round-robin, random, least-loaded, kv, kv-approx"

// NewPolicy returns the routing policy named mode ("" is round-robin). The
// kv modes get their diagnostics board, logger and metrics registry from
// kv. Every process that routes (serve, frontend) builds its policy here.
func NewPolicy(ctx context.Context, mode string, kv KVConfig) (Policy, error) {
	switch mode {
	case "round-robin", "":
		return &RoundRobin{}, nil
	case "random":
		return Random{}, nil
	case "least-loaded":
		return LeastLoaded{}, nil
	case "kv":
		return NewKV(ctx, kv)
	case "kv-approx":
		return NewKVApprox(ctx, kv)
	}
	return nil, fmt.Errorf("unknown router mode %q (want %s)", mode, Modes)
}
