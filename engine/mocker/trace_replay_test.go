package mocker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/kvcache"
)

// TestMooncakeTierReplay replays the Mooncake conversation and synthetic
// traces (FAST'25: arrival ms, input and output lengths, one hash id per
// 512-token block) through mocker workers with the seeds' Qwen3-0.6B
// timing and 14,816-token pools, without and with the host and disk tiers,
// in simulated time: testing/synctest's clock advances only when every
// worker and client waits, so an hour of trace takes seconds and every
// TTFT is exactly the timing model's. A request goes to the worker whose
// predicted TTFT is lowest: its queued prefill plus this prompt's
// recompute and onboard time, priced from each worker's own cache
// (MatchTiers), the same rule for both configurations. It prints, per
// trace and configuration, the share of prompt tokens served from cache
// and the mean and p90 TTFT (docs/benchmarks.md has the figures).
//
// It is an experiment, not a unit test: it runs only with
// TANDEM_TRACE_REPLAY=1 (traces from $TANDEM_SHARED/traces/mooncake) or
// TANDEM_TRACE_REPLAY=DIR; TANDEM_TRACE_NAMES=conversation_trace picks
// traces, TANDEM_TRACE_WORKERS the number of workers, TANDEM_TRACE_CONFIGS
// the configurations besides g1 (g1+g2+g3, +shared, +shared-g2,
// +shared-g2g3, +fleet-g2).
func TestMooncakeTierReplay(t *testing.T) {
	dir := os.Getenv("TANDEM_TRACE_REPLAY")
	if dir == "" {
		t.Skip("set TANDEM_TRACE_REPLAY=1 (or a trace directory) to replay the Mooncake traces")
	}
	if dir == "1" {
		dir = filepath.Join(os.Getenv("TANDEM_SHARED"), "traces", "mooncake")
	}
	const gib = 1 << 30
	type config struct {
		name  string
		tiers TierConfig
		share replayShare
	}
	tiered := replayTiers(16*gib, 128*gib)
	configs := []config{
		{"g1", TierConfig{}, replayShare{}},
		{"g1+g2+g3", tiered, replayShare{}},
		{"+shared", tiered, replayShare{disk: true}},
		{"+shared-g2", tiered, replayShare{host: true}},
		{"+shared-g2g3", tiered, replayShare{host: true, disk: true}},
		{"+fleet-g2", tiered, replayShare{host: true, group: -1}},
	}
	if n := os.Getenv("TANDEM_TRACE_CONFIGS"); n != "" {
		// The baseline always runs first: every other line is against it.
		keep := configs[:1]
		for _, c := range configs[1:] {
			if slices.Contains(strings.Split(n, ","), c.name) {
				keep = append(keep, c)
			}
		}
		configs = keep
	}
	names := []string{"conversation_trace", "synthetic_trace"}
	if n := os.Getenv("TANDEM_TRACE_NAMES"); n != "" {
		names = strings.Split(n, ",")
	}
	for _, name := range names {
		entries, err := loadTrace(filepath.Join(dir, name+".jsonl"))
		if err != nil {
			t.Skip(err)
		}
		var base replayResult
		for i, c := range configs {
			var r replayResult
			synctest.Test(t, func(t *testing.T) { r = replay(t, entries, c.tiers, c.share) })
			t.Logf("%-18s %-12s requests %d  prompt tokens %d  from cache %d (%.1f%%; onboarded %d: host %d, disk %d)  TTFT mean %.0f ms  p90 %.0f ms  (mean queue %.0f ms, onboard copy %.1f ms, prefill %.0f ms)",
				name, c.name, r.n, r.prompt, r.cached, 100*float64(r.cached)/float64(r.prompt), r.onboarded, r.fromHost, r.fromDisk,
				r.mean*1000, r.p90*1000, r.queue*1000, r.copying*1000, (r.mean-r.queue-r.copying)*1000)
			if i == 0 {
				base = r
				continue
			}
			t.Logf("%-18s %-12s cached tokens ×%.2f, mean TTFT %+.1f%%, p90 TTFT %+.1f%%", name, "vs g1",
				float64(r.cached)/float64(max(base.cached, 1)), 100*(r.mean/base.mean-1), 100*(r.p90/base.p90-1))
		}
	}
}

// replayTiers is the tiered configuration, its sizes and links
// overridable for experiments: TANDEM_TRACE_HOST_GIB, TANDEM_TRACE_DISK_GIB,
// TANDEM_TRACE_HOST_BW and TANDEM_TRACE_DISK_BW (bytes per second).
func replayTiers(host, disk int64) TierConfig {
	f := func(name string, def float64) float64 {
		if v, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil && v >= 0 && v < 1e15 {
			return v
		}
		return def
	}
	const gib = 1 << 30
	return TierConfig{
		HostBytes:     int64(f("TANDEM_TRACE_HOST_GIB", float64(host)/gib) * gib),
		DiskBytes:     int64(f("TANDEM_TRACE_DISK_GIB", float64(disk)/gib) * gib),
		HostBandwidth: f("TANDEM_TRACE_HOST_BW", 0),
		DiskBandwidth: f("TANDEM_TRACE_DISK_BW", 0),
	}
}

// replayShare says which lower tiers the workers share and in groups of
// how many consecutive workers: 0 is replayHostWorkers (a host), -1 all
// of them (a fleet-wide pool: a bound, not a host's memory).
type replayShare struct {
	host, disk bool
	group      int
}

type traceEntry struct {
	Timestamp    float64 `json:"timestamp"`
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
}

func loadTrace(path string) ([]traceEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []traceEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var e traceEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

type replayResult struct {
	n, prompt, cached, onboarded int
	fromHost, fromDisk           int // onboarded tokens per tier
	mean, p90                    float64
	// queue and copying are per-request means: the wait for admission
	// and the onboard's copy (TTFT less both is the prefill and the steps
	// it shares).
	queue, copying float64
}

const (
	// replayWorkers keeps the conversation trace's hour below saturation:
	// a 14,816-token pool holds one or two of its ~7,000-token prompts
	// for the ~10 s they decode, so a worker completes under 0.2 requests
	// a second and the trace brings 3.4.
	replayWorkers   = 32
	replayMaxInput  = 13000 // with replayMaxOutput, fits the 14,816-token context
	replayMaxOutput = 1024
	traceBlock      = 512 // tokens per Mooncake hash id
	// replayHostWorkers is how many workers share a host's disk in the
	// shared configuration: an 8-GPU H100 host (MLCommons inference
	// results' system descriptions: accelerators_per_node 8), one worker
	// per GPU.
	replayHostWorkers = 8
)

// tracePrompt makes each hash id a fixed run of token ids, so requests with
// equal hash ids share exactly those blocks.
func tracePrompt(e traceEntry) []engine.Token {
	n := min(e.InputLength, replayMaxInput)
	p := make([]engine.Token, 0, n)
	for _, h := range e.HashIDs {
		for j := 0; j < traceBlock && len(p) < n; j++ {
			p = append(p, engine.Token(1000+mix(uint64(h)*traceBlock+uint64(j))%29000))
		}
	}
	for len(p) < n { // a trace whose ids fall short of its length
		p = append(p, engine.Token(1000+mix(uint64(len(p)))%29000))
	}
	return p
}

func replay(t *testing.T, entries []traceEntry, tiers TierConfig, share replayShare) replayResult {
	ctx := context.Background()
	workers := replayWorkers
	if n, err := strconv.Atoi(os.Getenv("TANDEM_TRACE_WORKERS")); err == nil && n > 0 && n <= 1024 {
		workers = n
	}
	var ws []*Engine
	group := share.group
	switch {
	case group == 0:
		group = replayHostWorkers
	case group < 0:
		group = workers
	}
	for i := range workers {
		if share.disk && i%group == 0 {
			tiers.Shared = NewSharedDisk()
		}
		if share.host && i%group == 0 {
			tiers.SharedHost = NewSharedHost("")
		}
		e, err := New(Config{Model: "qwen3-0.6b", Timing: Qwen3_0_6BTiming(), KVCapacityTokens: SeedKVCapacityTokens,
			Tiers: tiers, Logger: quiet(), Vocabulary: vocab, EngineLabel: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, e)
	}
	defer func() {
		for _, e := range ws {
			e.Close()
		}
	}()
	blockBytes := int64(ws[0].cfg.BlockSize) * int64(ws[0].cfg.KVBytesPerToken)
	var (
		mu      sync.Mutex
		queued  = make([]float64, len(ws)) // predicted prefill seconds routed and not yet answered
		ttfts   []float64
		res     replayResult
		wg      sync.WaitGroup
		onboard = ws[0].cfg.Tiers
	)
	start := time.Now()
	for _, en := range entries {
		if d := time.Until(start.Add(time.Duration(en.Timestamp * float64(time.Millisecond)))); d > 0 {
			time.Sleep(d)
		}
		prompt := tracePrompt(en)
		best, bestCost, bestPrefill, bestRoom := 0, 0.0, 0.0, false
		need := (len(prompt) + ws[0].cfg.BlockSize - 1) / ws[0].cfg.BlockSize
		for i, e := range ws {
			var g1 int
			var lower [kvcache.NumTiers]int
			if err := e.do(ctx, func() { g1, lower = e.cache.MatchTiers(prompt[:len(prompt)-1]) }); err != nil {
				t.Fatal(err)
			}
			copyTime := onboard.onboardWall(lower[kvcache.TierG2]/e.cfg.BlockSize, lower[kvcache.TierG3]/e.cfg.BlockSize, blockBytes)
			prefill := e.EstimatePrefill(len(prompt)-g1-lower[kvcache.TierG2]-lower[kvcache.TierG3]) + copyTime
			mu.Lock()
			cost := queued[i] + prefill
			mu.Unlock()
			// A worker whose pool cannot take the prompt now (its running
			// requests hold it, or others already wait) admits it only
			// when some finish, a wait no prefill estimate prices: such
			// workers are chosen only when every worker is one, as the
			// router's ttft cost treats a full KV cache as a limit.
			ld := e.Load()
			room := ld.Waiting == 0 && ld.UsedBlocks+need <= ld.TotalBlocks
			if !room {
				cost += float64(ld.Waiting+1) * 10 // beyond any prefill: only the order among full workers matters
			}
			if i == 0 || (room && !bestRoom) || (room == bestRoom && cost < bestCost) {
				best, bestCost, bestPrefill, bestRoom = i, cost, prefill, room
			}
		}
		mu.Lock()
		queued[best] += bestPrefill
		mu.Unlock()
		s, err := ws[best].Generate(ctx, &engine.Request{Prompt: prompt, MaxTokens: max(1, min(en.OutputLength, replayMaxOutput)), IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		sent := time.Now()
		wg.Add(1)
		go func(w int, prefill float64, n int) {
			defer wg.Done()
			d, err := s.Recv()
			ttft := time.Since(sent).Seconds()
			mu.Lock()
			queued[w] -= prefill
			if err == nil {
				ttfts = append(ttfts, ttft)
				res.n++
				res.prompt += n
				res.cached += d.CachedTokens
			}
			mu.Unlock()
			for err == nil && d.Finish == engine.FinishNone {
				d, err = s.Recv()
			}
		}(best, bestPrefill, len(prompt))
	}
	wg.Wait()
	for _, e := range ws {
		res.fromHost += int(e.stats.onboardBlocks[kvcache.TierG2].Load()) * e.cfg.BlockSize
		res.fromDisk += int(e.stats.onboardBlocks[kvcache.TierG3].Load()) * e.cfg.BlockSize
		res.queue += math.Float64frombits(e.stats.queue.sum.Load())
		res.copying += math.Float64frombits(e.stats.onboard.sum.Load())
	}
	res.onboarded = res.fromHost + res.fromDisk
	slices.Sort(ttfts)
	sum := 0.0
	for _, v := range ttfts {
		sum += v
	}
	if len(ttfts) > 0 {
		res.mean = sum / float64(len(ttfts))
		res.queue /= float64(len(ttfts))
		res.copying /= float64(len(ttfts))
		res.p90 = ttfts[(len(ttfts)*9)/10]
	}
	return res
}
