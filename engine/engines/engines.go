// Package engines chooses and builds the engine of in-process workers
// from one configuration (the --engine, --model and engine flags that
// `tandem serve` and `tandem worker` share): the mocker, the native Go
// transformer, or upstream servers. A command registers the flags with
// AddFlags and gets a worker factory from Build.
package engines

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/engine/native"
	nativemodel "github.com/tandemllm/tandem/engine/native/model"
	"github.com/tandemllm/tandem/engine/upstream"
	"github.com/tandemllm/tandem/internal/connlimit"
	"github.com/tandemllm/tandem/planes/kvevents"
	"github.com/tandemllm/tandem/process"
	"github.com/tandemllm/tandem/structured"
	"github.com/tandemllm/tandem/tokenizer"
)

// Factory builds worker i's engine.
type Factory = func(i int) (engine.Engine, error)

// Config chooses and configures the engine of in-process workers; its
// fields are flags (AddFlags). Use it by pointer: it keeps the native
// model it loaded once for every worker.
type Config struct {
	// Kind is --engine: mocker, native or upstream.
	Kind string
	// ModelDir is --model (empty: the built-in tandem-mock).
	ModelDir string
	// Mock is the mocker's configuration (--block-size and the mocker
	// flags; its KVEvents the --kv-events-* settings of both engines).
	Mock mocker.Config
	// Timing is --timing: dynamo or qwen3-0.6b.
	Timing string
	// KVEvents is --kv-events (on or off); KVFormat --kv-events-format.
	KVEvents    string
	KVFormat    string
	kvEventsOff int
	kvTokenIDs  bool
	// VLLMCompatible: the worker stands in for a vLLM server
	// (--openai-addr).
	VLLMCompatible bool
	replayAllow    []string
	replayLimits   connlimit.Limits // the replay socket's caps
	threads        int
	noMmap         bool
	kvType         string
	script         string // --mocker-script
	// Up is --engine upstream's servers.
	Up    upstream.Fleet
	tiers tierFlags
	// chatTemplate is --chat-template: a template file in place of the
	// model's own (applied in chattemplate.go).
	chatTemplate string
	// loaded is the native model, read once for every worker
	// (nativeModel).
	loadMu sync.Mutex
	loaded *native.Loaded
	// servedVocab is loaded's structured vocabulary when servedModel's
	// tokenizer is loaded's (a native GGUF file), else nil.
	servedVocab *structured.Vocab
	// kvBytes is --kv-cache-bytes (native; 0: the engine's default).
	kvBytes int64
	// Workers is how many engines the factory will build in this process
	// (serve's workers; 0: 1): the native engine's default KV size splits
	// the machine's memory between them.
	Workers int
}

// tierFlags are the KV offload tiers' flags (kvcache G2 and G3).
type tierFlags struct {
	host, disk string // sizes: bytes, or with a KB/MB/GB/TB or KiB/MiB/GiB/TiB suffix
	diskDir    string
	diskShared bool
	// hostShared: the mocker's host tier is one simulated pool per group
	// of workers (--kv-offload-host-shared).
	hostShared bool
	// sharedWorkers is how many consecutive in-process mocker workers
	// share one simulated disk or host pool (0: all of them).
	sharedWorkers int
	sharedMu      sync.Mutex
	sharedDisks   map[int]*mocker.SharedDisk
	sharedHosts   map[int]*mocker.SharedHost
	hostBW        float64
	diskBW        float64
	hostLat       time.Duration
	diskLat       time.Duration
}

// parseByteSize reads "123", "64GiB", "1.5TB" (decimal and binary suffixes).
func ParseByteSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" || t == "0" {
		return 0, nil
	}
	mult := 1.0
	for _, u := range []struct {
		suffix string
		m      float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.m
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || v*mult > 1<<62 || math.IsNaN(v) {
		return 0, fmt.Errorf("size %q: want a byte count such as 64GiB", s)
	}
	return int64(v * mult), nil
}

// mockerTiers converts the flags for the mocker (sizes only; nothing is
// written to --kv-offload-disk-dir by a simulated engine).
func (t *tierFlags) mockerTiers() (mocker.TierConfig, error) {
	host, err := ParseByteSize(t.host)
	if err != nil {
		return mocker.TierConfig{}, fmt.Errorf("--kv-offload-host-bytes: %w", err)
	}
	disk, err := ParseByteSize(t.disk)
	if err != nil {
		return mocker.TierConfig{}, fmt.Errorf("--kv-offload-disk-bytes: %w", err)
	}
	if t.hostBW < 0 || t.diskBW < 0 || t.hostLat < 0 || t.diskLat < 0 {
		return mocker.TierConfig{}, errors.New("--kv-offload-*-bandwidth and -latency must not be negative")
	}
	if t.sharedWorkers < 0 || t.sharedWorkers > 1<<20 {
		return mocker.TierConfig{}, fmt.Errorf("--kv-offload-shared-workers %d: want 0 (all) to %d", t.sharedWorkers, 1<<20)
	}
	if t.diskShared && disk == 0 {
		return mocker.TierConfig{}, errors.New("--kv-offload-disk-shared needs a disk tier (--kv-offload-disk-bytes)")
	}
	if t.hostShared && host == 0 {
		return mocker.TierConfig{}, errors.New("--kv-offload-host-shared needs a host tier (--kv-offload-host-bytes)")
	}
	return mocker.TierConfig{HostBytes: host, DiskBytes: disk, HostBandwidth: t.hostBW, DiskBandwidth: t.diskBW,
		HostLatency: t.hostLat, DiskLatency: t.diskLat}, nil
}

func (e *Config) AddFlags(f *pflag.FlagSet) {
	e.Mock = mocker.DefaultConfig()
	e.Mock.KVEvents.Endpoint = "tcp://127.0.0.1:0"
	f.StringVar(&e.Kind, "engine", "mocker", "engine: mocker (simulated vLLM-class GPU worker), native (real Go transformer) or upstream (vLLM servers: --upstream)")
	e.Up.AddFlags(f)
	f.StringVar(&e.ModelDir, "model", "", "model directory: HF tokenizer.json + tokenizer_config.json, or llama2.c .bin + tok*.bin (native); empty: the built-in tandem-mock")
	f.StringVar(&e.chatTemplate, "chat-template", "", "chat template file in place of the model's own: a Jinja file (chat_template.jinja) or a JSON file with chat_template (tokenizer_config.json); needed to chat with a model that carries none")
	f.IntVar(&e.threads, "threads", 0, "native: compute threads per worker (0: all cores)")
	f.BoolVar(&e.noMmap, "no-mmap", false, "native: copy a GGUF file's weights into the process's memory (huge pages) at start instead of reading them in place from the file's mapping, as llama.cpp's --no-mmap: a slower start and memory not shared with other processes mapping the file, for faster decode where the page cache maps the file in 4 KiB pages")
	f.Var((*process.ByteSize)(&e.kvBytes), "kv-cache-bytes", "native: KV cache memory per worker, always at least one full context (e.g. 512MiB, 2GiB; 0: one full context or 256 MiB, whichever is larger, if half the machine's available memory (MemAvailable, or the cgroup's limit) split between the workers has room, else what fits, with the context shortened to it; the choice is logged and on /health)")
	f.StringVar(&e.kvType, "kv-cache-dtype", "f16", "native: KV cache element type: f16 (llama.cpp's default: half the memory of f32, and decode reads half the bytes) or f32; KV transfer carries fp32 either way")
	e.Mock.AddFlags(f)
	f.StringVar(&e.script, "mocker-script", "", `mocker: a reply script (JSON {"rules":[{"when":"substring of the last user message","reply":"exact text"}]}): the first matching rule's reply is written, then EOS, so a random engine can write a tool call`)
	f.StringVar(&e.Timing, "timing", "dynamo", "mocker: timing model: dynamo (Dynamo's polynomial) or qwen3-0.6b (the seed's GPU: ~80 ms miss, ~15 ms hit at 1,500 tokens)")
	f.StringVar(&e.tiers.host, "kv-offload-host-bytes", "0", "KV offload: host-memory tier (G2) size, e.g. 64GiB: blocks evicted from the engine's pool go there and are onboarded on a prefix hit instead of recomputed (0: off)")
	f.StringVar(&e.tiers.disk, "kv-offload-disk-bytes", "0", "KV offload: disk tier (G3) size, e.g. 500GB: blocks evicted from the host tier (or the pool, without one) go there (0: off)")
	f.StringVar(&e.tiers.diskDir, "kv-offload-disk-dir", "", "KV offload: directory under which the native engine writes the disk tier's files (one fresh subdirectory per worker, removed at exit; default: the system's temporary directory); the mocker only models the disk's time")
	f.BoolVar(&e.tiers.diskShared, "kv-offload-disk-shared", false, "KV offload: the disk tier is one the workers of the host share: each writes its evicted blocks there and onboards the others', so a prefix computed by one worker is copied, not recomputed, by another (native: --kv-offload-disk-dir is that directory; mocker: one simulated disk per --kv-offload-shared-workers workers, whose reads queue on it, and whose blocks the router counts as every sharing worker's)")
	f.BoolVar(&e.tiers.hostShared, "kv-offload-host-shared", false, "KV offload (mocker): the host-memory tier is one pool the workers of the host share (a shared-memory segment): each keeps its evicted blocks there, bounded by --kv-offload-host-bytes, and onboards the others' over its own host link; one pool per --kv-offload-shared-workers workers, whose blocks the router counts as every sharing worker's")
	f.IntVar(&e.tiers.sharedWorkers, "kv-offload-shared-workers", 0, "KV offload (mocker, with --kv-offload-disk-shared or --kv-offload-host-shared): how many consecutive in-process workers share one simulated disk and host pool, e.g. 8 for an 8-GPU host (0: all)")
	f.Float64Var(&e.tiers.hostBW, "kv-offload-host-bandwidth", mocker.DefaultHostBandwidth, "mocker: simulated host↔GPU copy bandwidth, bytes/s (PCIe 5.0 x16 class)")
	f.Float64Var(&e.tiers.diskBW, "kv-offload-disk-bandwidth", mocker.DefaultDiskBandwidth, "mocker: simulated disk read bandwidth, bytes/s (NVMe class)")
	f.DurationVar(&e.tiers.hostLat, "kv-offload-host-latency", mocker.DefaultHostLatency, "mocker: simulated latency of one host↔GPU copy")
	f.DurationVar(&e.tiers.diskLat, "kv-offload-disk-latency", mocker.DefaultDiskLatency, "mocker: simulated latency of one disk read")
	f.StringVar(&e.KVEvents, "kv-events", "on", "publish vLLM KV events over ZMQ: on or off (off: a worker that silently publishes nothing)")
	f.StringVar(&e.KVFormat, "kv-events-format", "map", "KV events: event encoding: map (current vLLM) or array (legacy positional)")
	f.StringVar(&e.Mock.KVEvents.Endpoint, "kv-events-endpoint", e.Mock.KVEvents.Endpoint, "KV events: ZMQ PUB bind address; worker i binds port+i (port 0: any free port)")
	f.StringVar(&e.Mock.KVEvents.ReplayEndpoint, "kv-events-replay-endpoint", "auto", "KV events: ZMQ ROUTER replay bind address; worker i binds port+i (auto: the PUB endpoint's host, any free port; off: no replay, so a gap in the stream is a loss)")
	e.replayLimits = kvevents.DefaultReplayLimits()
	f.IntVar(&e.replayLimits.MaxConns, "kv-events-replay-max-conns", e.replayLimits.MaxConns, "KV events: open connections the replay socket accepts (a replay is one short exchange; past it a connection is closed at accept, tandem_listener_refused_total, listener_capped)")
	f.IntVar(&e.replayLimits.MaxPerSource, "kv-events-replay-max-per-source", e.replayLimits.MaxPerSource, "KV events: open replay connections from one source address")
	f.DurationVar(&e.replayLimits.Handshake, "kv-events-replay-handshake-timeout", e.replayLimits.Handshake, "KV events: how long a replay connection may live (the zmq4 socket reads one greeting at a time, so a silent connection would stall the others)")
	f.StringSliceVar(&e.replayAllow, "kv-events-replay-allow", nil, "KV events: source networks (CIDRs or addresses) whose routers may connect to the replay socket; without it, while events carry token ids, the replay socket binds loopback only (auto) or refuses a wider --kv-events-replay-endpoint")
	f.StringVar(&e.Mock.KVEvents.Topic, "kv-events-topic", "", "KV events: ZMQ topic")
	f.BoolVar(&e.kvTokenIDs, "kv-events-token-ids", true, "KV events: include token ids (vLLM's events do); false publishes Tandem's block hashes only, so a subscriber learns no prompt (the router then needs --router-block-size equal to the engine's)")
	f.IntVar(&e.kvEventsOff, "kv-events-off", 0, "KV events: the first N workers publish no KV events (to test the router's detection)")
}

// Build loads the model's tokenizer and returns a factory for worker i.
func (e *Config) Build(log *slog.Logger) (*tokenizer.Model, Factory, error) {
	model, err := e.servedModel(log)
	if err != nil {
		return nil, nil, err
	}
	if e.script != "" && e.Kind != "mocker" {
		return nil, nil, fmt.Errorf("--mocker-script is for --engine mocker, not %s", e.Kind)
	}
	// Token byte strings for structured outputs, built once and shared
	// by every worker of the process; an upstream server masks with its
	// own, and a vocabulary held for nothing is heap every collection
	// marks.
	tokenVocab := func() (*structured.Vocab, error) {
		if e.servedVocab != nil {
			return e.servedVocab, nil
		}
		return structured.TokenizerVocab(model.Tokenizer)
	}
	switch e.Kind {
	case "mocker":
		vocab, err := tokenVocab()
		if err != nil {
			return nil, nil, err
		}
		cfg, err := e.mockerConfig(model, log)
		if err != nil {
			return nil, nil, err
		}
		cfg.TokenBytes = vocab
		return model, func(i int) (engine.Engine, error) { return e.newMocker(cfg, i) }, nil
	case "native":
		if e.ModelDir == "" {
			return nil, nil, fmt.Errorf("--engine native needs --model PATH (a GGUF file, a Hugging Face directory, or a llama2.c checkpoint directory)")
		}
		events, err := e.eventsConfig()
		if err != nil {
			return nil, nil, err
		}
		kvType, err := nativemodel.ParseKVType(e.kvType)
		if err != nil {
			return nil, nil, fmt.Errorf("--kv-cache-dtype: %w", err)
		}
		tiers, err := e.tiers.mockerTiers() // the sizes; the links are real here
		if err != nil {
			return nil, nil, err
		}
		if e.tiers.hostShared {
			return nil, nil, errors.New("--kv-offload-host-shared is the mocker's (the native engine shares its disk tier: --kv-offload-disk-shared)")
		}
		vocab, err := tokenVocab()
		if err != nil {
			return nil, nil, err
		}
		return model, func(i int) (engine.Engine, error) {
			ev, err := e.eventsFor(events, i)
			if err != nil {
				return nil, err
			}
			l, err := e.nativeModel()
			if err != nil {
				return nil, err
			}
			return native.New(l.Model, native.Options{Model: model.Name, Threads: e.threads, KVType: kvType, KVEvents: ev, KVBytes: e.kvBytes, Workers: e.Workers, Vocab: vocab,
				KVOffloadHostBytes: tiers.HostBytes, KVOffloadDiskBytes: tiers.DiskBytes, KVOffloadDiskDir: e.tiers.diskDir, KVOffloadDiskShared: e.tiers.diskShared})
		}, nil
	case "upstream":
		if err := e.Up.Check(); err != nil {
			return nil, nil, err
		}
		return model, e.upstreamFactory(model.Tokenizer), nil
	}
	return nil, nil, fmt.Errorf("unknown --engine %q (want mocker, native or upstream)", e.Kind)
}

// upstreamFactory returns worker i's engine: the --upstream servers, then
// the --upstream-prefill ones.
func (e *Config) upstreamFactory(codec upstream.Codec) Factory {
	return func(i int) (engine.Engine, error) {
		cfg, err := e.Up.Config(i)
		if err != nil {
			return nil, err
		}
		cfg.BlockSize, cfg.Codec = e.Mock.BlockSize, codec
		return upstream.New(context.Background(), cfg)
	}
}

func (e *Config) mockerConfig(model *tokenizer.Model, log *slog.Logger) (mocker.Config, error) {
	cfg := e.Mock
	cfg.Model = model.Name
	cfg.Logger = log
	cfg.EOS = model.Tokenizer.EOS()
	cfg.Vocabulary = model.Tokenizer.Encode(mocker.DefaultText)
	if model.ContextLength > 0 {
		cfg.ContextLength = model.ContextLength
	}
	tiers, err := e.tiers.mockerTiers()
	if err != nil {
		return cfg, err
	}
	cfg.Tiers = tiers
	if e.script != "" {
		sc, err := mocker.LoadScript(e.script, model)
		if err != nil {
			return cfg, fmt.Errorf("--mocker-script: %w", err)
		}
		cfg.Script = sc
	}
	switch e.Timing {
	case "dynamo":
		cfg.Timing = mocker.DynamoTiming()
	case "qwen3-0.6b":
		cfg.Timing = mocker.Qwen3_0_6BTiming()
	default:
		return cfg, fmt.Errorf("unknown --timing %q (want dynamo or qwen3-0.6b)", e.Timing)
	}
	cfg.KVEvents, err = e.eventsConfig()
	return cfg, err
}

// eventsConfig parses the KV event flags, which both engines share.
func (e *Config) eventsConfig() (kvevents.EngineConfig, error) {
	ev := e.Mock.KVEvents
	switch e.KVEvents {
	case "on":
		ev.Enabled = true
	case "off":
		ev.Enabled = false
	default:
		return ev, fmt.Errorf("--kv-events must be on or off, not %q", e.KVEvents)
	}
	var err error
	if ev.Format, err = kvevents.ParseFormat(e.KVFormat); err != nil {
		return ev, fmt.Errorf("--kv-events-format: %w", err)
	}
	ev.OmitTokenIDs = !e.kvTokenIDs
	// Past batches with token ids are prompts: Tandem's workers answer
	// replay history only with their token (in discovery); a worker that
	// stands in for vLLM (--openai-addr) answers anyone, as vLLM does.
	ev.ReplayAuth = !e.VLLMCompatible
	if ev.ReplayAllow, err = kvevents.ParseAllow(e.replayAllow); err != nil {
		return ev, fmt.Errorf("--kv-events-replay-allow: %w", err)
	}
	// Zero (a command that registers no replay flags): the defaults.
	if l := e.replayLimits; l != (connlimit.Limits{}) && (l.MaxConns < 1 || l.MaxPerSource < 1 || l.MaxPerSource > l.MaxConns || l.Handshake <= 0) {
		return ev, fmt.Errorf("--kv-events-replay-max-conns (%d) and -max-per-source (%d) must be at least 1, the second at most the first, and --kv-events-replay-handshake-timeout (%v) positive", l.MaxConns, l.MaxPerSource, l.Handshake)
	}
	ev.ReplayLimits = e.replayLimits
	return ev, nil
}

// sharedDisk is worker i's simulated shared disk
// (--kv-offload-disk-shared): one per --kv-offload-shared-workers
// consecutive workers, named for the router by process and group.
func (t *tierFlags) sharedDisk(i int) *mocker.SharedDisk {
	return sharedOf(t, &t.sharedDisks, i, "disk", mocker.NewSharedDiskNamed)
}

// sharedHost is worker i's simulated shared host pool
// (--kv-offload-host-shared), grouped as sharedDisk groups disks.
func (t *tierFlags) sharedHost(i int) *mocker.SharedHost {
	return sharedOf(t, &t.sharedHosts, i, "host", mocker.NewSharedHost)
}

// sharedOf is worker i's group's shared tier in *m, made by mk under a
// name unique to this process and group the first time it is asked for.
func sharedOf[T any](t *tierFlags, m *map[int]T, i int, kind string, mk func(name string) T) T {
	g := 0
	if t.sharedWorkers > 0 {
		g = i / t.sharedWorkers
	}
	t.sharedMu.Lock()
	defer t.sharedMu.Unlock()
	if *m == nil {
		*m = map[int]T{}
	}
	v, ok := (*m)[g]
	if !ok {
		host, _ := os.Hostname()
		v = mk(fmt.Sprintf("%s/%d/%s%d", host, os.Getpid(), kind, g))
		(*m)[g] = v
	}
	return v
}

func (e *Config) newMocker(cfg mocker.Config, i int) (engine.Engine, error) {
	if e.tiers.diskShared {
		cfg.Tiers.Shared = e.tiers.sharedDisk(i)
	}
	if e.tiers.hostShared {
		cfg.Tiers.SharedHost = e.tiers.sharedHost(i)
	}
	cfg.EngineLabel = fmt.Sprint(i)
	cfg.Seed += uint64(i)
	var err error
	if cfg.KVEvents, err = e.eventsFor(cfg.KVEvents, i); err != nil {
		return nil, err
	}
	return mocker.New(cfg)
}

// eventsFor gives worker i its KV event settings: off for the first
// --kv-events-off workers, and its own ports otherwise
// (kvevents.ForWorker).
func (e *Config) eventsFor(ev kvevents.EngineConfig, i int) (kvevents.EngineConfig, error) {
	if i < e.kvEventsOff {
		ev.Enabled = false
	}
	return kvevents.ForWorker(ev, i)
}
