package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Fleet is --engine upstream's servers: the --upstream* flags, and the
// workers they make. Each server is one worker, except an SGLang server
// with attention-DP ranks, which is one worker per rank (ResolveTargets).
type Fleet struct {
	// URLs are the servers, one worker each (--upstream).
	URLs []string
	// Prefill are vLLM P/D prefill servers (--upstream-prefill, serve).
	Prefill []string
	// Events and Replay are the servers' KV event and replay endpoints,
	// in URLs' order (--upstream-kv-events, --upstream-kv-events-replay).
	Events, Replay []string
	// Model, APIKey, API, MetricsInterval and GuidedFields are every
	// server's Config fields of the same names.
	Model, APIKey, API string
	MetricsInterval    time.Duration
	GuidedFields       bool
	// DPSize is each SGLang server's attention-DP ranks as deployed
	// (--upstream-dp-size: SGLang's --dp-size with
	// --enable-dp-attention); 0: asked of each server at start-up, and a
	// server that does not answer then is one worker.
	DPSize int

	// targets are the workers the servers make (ResolveTargets); empty:
	// one per URL.
	targets []target
}

// target is one routable worker: a server, or one attention-DP rank of
// an SGLang server.
type target struct {
	server int // index into URLs
	rank   int
	// unknown: the server did not answer at start-up and no DPSize was
	// given, so this one worker is the whole server.
	unknown bool
}

// AddFlags registers the --upstream* flags of serve and worker
// (--upstream-prefill is AddPrefillFlag's: serve alone has it).
func (u *Fleet) AddFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&u.URLs, "upstream", nil, "upstream: base URL of a vLLM (or vLLM-compatible) server; repeat for one worker per server")
	fs.StringArrayVar(&u.Events, "upstream-kv-events", nil, "upstream: ZMQ KV event endpoint of each --upstream server, in order (vLLM --kv-events-config), for --router-mode kv")
	fs.StringVar(&u.Model, "upstream-model", "", "upstream: the servers' model name (empty: the first /v1/models lists)")
	fs.StringVar(&u.APIKey, "upstream-api-key", "", "upstream: API key sent to the servers")
	fs.StringVar(&u.API, "upstream-api", APIVLLM, "upstream: the servers' API: vllm (token-id prompts, return_token_ids, continuous usage; text-only answers of older vLLM are tokenized) openai (any OpenAI-compatible server: text prompts, standard fields only) sglang (SGLang's native /generate: token prompts, meta_info cached_tokens, one worker per attention-DP rank) or llamacpp (llama-server's /completion: token prompts, cache_prompt, slot affinity with id_slot; no KV events, so routed by approximation)")
	fs.DurationVar(&u.MetricsInterval, "upstream-metrics-interval", DefaultMetricsInterval, "upstream: how often each server's /metrics is scraped for its load (vllm:*, sglang:*, llamacpp:*; llama-server without --metrics: /slots); negative: never")
	fs.BoolVar(&u.GuidedFields, "upstream-guided-fields", false, "upstream: send structured outputs as vLLM's older guided_json/guided_regex/guided_choice/guided_grammar fields instead of structured_outputs (vLLM releases before structured_outputs)")
	fs.IntVar(&u.DPSize, "upstream-dp-size", 0, "upstream (sglang): attention-DP ranks of each --upstream server (SGLang's --dp-size with --enable-dp-attention), one worker per rank; 0: asked of each server at start-up, and a server that does not answer yet is one worker (if it has more ranks it says so on /health: upstream_dp_ranks_unplanned)")
	fs.StringArrayVar(&u.Replay, "upstream-kv-events-replay", nil, "upstream: ZMQ replay (ROUTER) endpoint of each --upstream server's KV events, in order (vLLM replay_endpoint); empty: gaps are losses")
}

// AddPrefillFlag registers --upstream-prefill.
func (u *Fleet) AddPrefillFlag(fs *pflag.FlagSet) {
	fs.StringArrayVar(&u.Prefill, "upstream-prefill", nil, "upstream: a vLLM prefill server (NixlConnector); with any, the router drives vLLM's P/D protocol: prefill leg here, decode leg on the --upstream server it picks")
}

// Check reports flags that cannot describe a fleet: no server, or more
// event (replay) endpoints than servers (event endpoints).
func (u *Fleet) Check() error {
	if len(u.URLs) == 0 {
		return errors.New("--engine upstream needs --upstream URL (one per server)")
	}
	if len(u.Events) > len(u.URLs) {
		return fmt.Errorf("%d --upstream-kv-events for %d --upstream servers", len(u.Events), len(u.URLs))
	}
	if len(u.Replay) > len(u.Events) {
		return fmt.Errorf("%d --upstream-kv-events-replay for %d --upstream-kv-events", len(u.Replay), len(u.Events))
	}
	if u.DPSize < 0 || u.DPSize > maxDPSize {
		return fmt.Errorf("--upstream-dp-size %d: want 0 (ask the servers) to %d", u.DPSize, maxDPSize)
	}
	if u.DPSize > 0 && u.API != APISGLang {
		return fmt.Errorf("--upstream-dp-size is for --upstream-api sglang, not %s", u.API)
	}
	return nil
}

// ResolveTargets lists the workers the servers make: one per server, and
// for API sglang one per attention-DP rank (each rank has its own
// scheduler, radix cache and KV event publisher at the endpoint's port +
// rank, and serves the requests that name it in data_parallel_rank):
// DPSize ranks if given, without asking the servers, else as each
// server's /get_server_info reports them. A server that does not answer
// (down, or still loading) is not an error: it is one worker, which joins
// when the server answers (start-together orders: compose, pods); log is
// told. Each probe is bounded by 10 s.
func (u *Fleet) ResolveTargets(ctx context.Context, log *slog.Logger) error {
	u.targets = u.targets[:0]
	for i, url := range u.URLs {
		ranks, unknown := 1, false
		if u.API == APISGLang {
			ranks = u.DPSize
			if ranks == 0 {
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				info, err := ProbeSGLang(pctx, nil, url, u.APIKey)
				cancel()
				switch {
				case errors.Is(err, errNotUp):
					ranks, unknown = 1, true
					if log != nil {
						log.Warn("the SGLang server does not answer yet, so its attention-DP ranks are unknown: it is one worker until Tandem restarts (--upstream-dp-size N makes one per rank without asking)",
							"diagnostic_code", DiagUnavailable, "url", url, "err", err)
					}
				case err != nil:
					return err
				default:
					ranks = info.Ranks()
				}
			}
			if ranks > 1 && i < len(u.Events) && !isTCPOrInproc(u.Events[i]) {
				return fmt.Errorf("--upstream %s has %d attention-DP ranks, each publishing at its own port: give its bound endpoint (tcp://host:port, rank r at port+r), not %q", url, ranks, u.Events[i])
			}
		}
		for r := range ranks {
			u.targets = append(u.targets, target{server: i, rank: r, unknown: unknown})
		}
	}
	return nil
}

func isTCPOrInproc(ep string) bool {
	return strings.HasPrefix(ep, "tcp://") && len(ep) > 6 || strings.HasPrefix(ep, "inproc://") && len(ep) > 9
}

// Workers is the number of workers the servers make, not counting
// Prefill.
func (u *Fleet) Workers() int {
	if len(u.targets) > 0 {
		return len(u.targets)
	}
	return len(u.URLs)
}

// Config returns worker i's engine configuration: the resolved targets
// (or the servers in order), then the Prefill servers. BlockSize and
// Codec are the caller's.
func (u *Fleet) Config(i int) (Config, error) {
	cfg := Config{Model: u.Model, APIKey: u.APIKey, API: u.API, MetricsInterval: u.MetricsInterval, GuidedFields: u.GuidedFields, DPSize: u.DPSize}
	server, rank := i, 0
	if n := u.Workers(); i >= n {
		if i-n >= len(u.Prefill) {
			return cfg, fmt.Errorf("no --upstream server for worker %d", i)
		}
		cfg.URL = u.Prefill[i-n]
		return cfg, nil
	}
	if len(u.targets) > 0 {
		server, rank = u.targets[i].server, u.targets[i].rank
		cfg.DPRanksUnknown = u.targets[i].unknown
	}
	cfg.URL, cfg.DPRank = u.URLs[server], rank
	var err error
	if server < len(u.Events) {
		if cfg.KVEventsEndpoint, err = OffsetEndpointPort(u.Events[server], rank); err != nil {
			return cfg, err
		}
	}
	if server < len(u.Replay) {
		if cfg.KVEventsReplayEndpoint, err = OffsetEndpointPort(u.Replay[server], rank); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}
