package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tandemllm/tandem/engine/upstream"
)

// upstreamTarget is one routable worker of --engine upstream: a server,
// or one attention-DP rank of an SGLang server.
type upstreamTarget struct {
	server int // index into --upstream
	rank   int
}

// resolveTargets lists the workers the --upstream servers make: one per
// server, and for --upstream-api sglang one per attention-DP rank, as
// /get_server_info reports them (each rank has its own scheduler, radix
// cache and KV event publisher at the endpoint's port + rank, and serves
// the requests that name it in data_parallel_rank).
func (u *upstreamFlags) resolveTargets(ctx context.Context) error {
	u.targets = u.targets[:0]
	for i, url := range u.urls {
		ranks := 1
		if u.api == upstream.APISGLang {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			info, err := upstream.ProbeSGLang(pctx, nil, url, u.apiKey)
			cancel()
			if err != nil {
				return err
			}
			ranks = info.Ranks()
			if ranks > 1 && i < len(u.events) && !isTCPOrInproc(u.events[i]) {
				return fmt.Errorf("--upstream %s has %d attention-DP ranks, each publishing at its own port: give its bound endpoint (tcp://host:port, rank r at port+r), not %q", url, ranks, u.events[i])
			}
		}
		for r := range ranks {
			u.targets = append(u.targets, upstreamTarget{server: i, rank: r})
		}
	}
	return nil
}

func isTCPOrInproc(ep string) bool {
	return len(ep) > 6 && (ep[:6] == "tcp://" || (len(ep) > 9 && ep[:9] == "inproc://"))
}

// workers is the number of --upstream workers (not counting prefill).
func (u *upstreamFlags) workers() int {
	if len(u.targets) > 0 {
		return len(u.targets)
	}
	return len(u.urls)
}

// config returns worker i's engine configuration: the resolved targets
// (or the servers in order), then the --upstream-prefill servers.
func (u *upstreamFlags) config(i int) (upstream.Config, error) {
	cfg := upstream.Config{Model: u.model, APIKey: u.apiKey, API: u.api, MetricsInterval: u.metricsInterval, GuidedFields: u.guidedFields}
	server, rank := i, 0
	if n := u.workers(); i >= n {
		if i-n >= len(u.prefill) {
			return cfg, fmt.Errorf("no --upstream server for worker %d", i)
		}
		cfg.URL = u.prefill[i-n]
		return cfg, nil
	}
	if len(u.targets) > 0 {
		server, rank = u.targets[i].server, u.targets[i].rank
	}
	cfg.URL, cfg.DPRank = u.urls[server], rank
	var err error
	if server < len(u.events) {
		if cfg.KVEventsEndpoint, err = upstream.OffsetEndpointPort(u.events[server], rank); err != nil {
			return cfg, err
		}
	}
	if server < len(u.replay) {
		if cfg.KVEventsReplayEndpoint, err = upstream.OffsetEndpointPort(u.replay[server], rank); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}
