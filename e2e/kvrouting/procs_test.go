package kvrouting

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/router"
)

// FleetScenario is a run of any workload on N mocker workers that publish
// real KV events over ZMQ, routed by one router: the starvation checks and
// the Mooncake trace replay.
type FleetScenario struct {
	Workers    int
	KVCapacity int // tokens per worker (0: mocker's default)
	// ContextLength bounds prompt + output (0: 32,768).
	ContextLength int
	Timing        mocker.TimingModel // zero: the seeds' Qwen3-0.6B
	Speedup       float64            // divides simulated time (default 20)
	Mode          string
	Cost          router.CostModel
	Seed          uint64
	Requests      []FleetRequest
	// Concurrency > 0 sends the requests in order from that many closed-loop
	// clients; 0 sends each at its Arrival (open loop).
	Concurrency int
	Logger      *slog.Logger
}

// FleetRequest is one request of a fleet workload.
type FleetRequest struct {
	Tokens []engine.Token
	Output int
	// Arrival is the simulated time from the start (open loop).
	Arrival time.Duration
}

// FleetResult is what a fleet run measured. TTFTs are simulated time
// (wall × Speedup).
type FleetResult struct {
	PerWorker             map[string]int
	TTFTs                 []time.Duration // sorted
	Mean, P50, P90, P99   time.Duration
	CachedTokens, Prompts int // engine-reported cached tokens, prompt tokens
	Elapsed               time.Duration
	Diagnostics           []health.Diagnostic
	// Preemptions sums the engines' vllm:num_preemptions_total;
	// PreemptionsBy is per worker.
	Preemptions   int
	PreemptionsBy map[string]int
	// TTFTModels is each worker's TTFT model at the end (ttft cost).
	TTFTModels map[string]router.TTFTModelState
	// Slowest are the requests with the longest TTFTs, slowest first
	// (at most 8): what the tail is made of.
	Slowest []FleetRecord
}

// FleetRecord is one request of a fleet run.
type FleetRecord struct {
	N, Prompt, Cached int
	Worker            string
	Arrival, TTFT     time.Duration
}

// Share is the largest fraction of requests one worker served.
func (r FleetResult) Share() (maxShare, minShare float64) {
	total := 0
	for _, n := range r.PerWorker {
		total += n
	}
	if total == 0 {
		return 0, 0
	}
	minShare = 1
	for _, n := range r.PerWorker {
		f := float64(n) / float64(total)
		maxShare, minShare = max(maxShare, f), min(minShare, f)
	}
	return maxShare, minShare
}

// RunFleet executes a fleet scenario with fresh engines and router.
func RunFleet(ctx context.Context, sc FleetScenario) (FleetResult, error) {
	if sc.Speedup == 0 {
		sc.Speedup = 20
	}
	if sc.Timing == (mocker.TimingModel{}) {
		sc.Timing = mocker.Qwen3_0_6BTiming()
	}
	if sc.ContextLength == 0 {
		sc.ContextLength = 32768
	}
	log := sc.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	res := FleetResult{PerWorker: map[string]int{}}
	if sc.Workers < 1 {
		return res, errors.New("kvrouting: fleet needs a worker")
	}
	board := health.NewBoard(log, nil)
	policy, kv, err := newPolicy(ctx, Scenario{Mode: sc.Mode, Cost: sc.Cost, Seed: sc.Seed}, board, log, nil)
	if err != nil {
		return res, err
	}
	if kv != nil {
		defer kv.Close()
	}
	r := router.New(policy, prometheus.NewRegistry())
	var engRegs []*prometheus.Registry
	for i := range sc.Workers {
		e, err := mocker.New(mocker.Config{
			Model: "m", Seed: sc.Seed + uint64(i), BlockSize: BlockSize, KVCapacityTokens: sc.KVCapacity,
			ContextLength: sc.ContextLength, Timing: sc.Timing, Speedup: sc.Speedup,
			EngineLabel: fmt.Sprint(i), Logger: log,
			KVEvents: mocker.KVEventsConfig{Enabled: kv != nil, Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"},
		})
		if err != nil {
			return res, fmt.Errorf("worker %d: %w", i, err)
		}
		defer e.Close()
		reg := prometheus.NewRegistry()
		if err := reg.Register(e.Collector()); err != nil {
			return res, err
		}
		engRegs = append(engRegs, reg)
		id := fmt.Sprint("worker-", i)
		res.PerWorker[id] = 0
		if kv != nil {
			kv.SetReplayToken(id, e.KVEventsReplayToken())
			if err := kv.AddWorker(id, e.KVEventsEndpoint(), e.KVEventsReplayEndpoint(), BlockSize); err != nil {
				return res, err
			}
		}
		r.AddWorker(router.Worker{ID: id, Model: "m", Gen: e, Info: e.Info(), Timing: e})
	}

	scale := time.Duration(sc.Speedup)
	var (
		mu     sync.Mutex
		runErr error
		wg     sync.WaitGroup
		recs   []FleetRecord
	)
	do := func(n int, q FleetRequest) {
		err := func() error {
			req := &router.Request{ID: fmt.Sprint("req-", n), Model: "m", Tokens: q.Tokens}
			rt, err := r.Route(req)
			if err != nil {
				return fmt.Errorf("route %d: %w", n, err)
			}
			defer rt.Done()
			t0 := time.Now()
			st, err := rt.Worker.Gen.Generate(ctx, &engine.Request{ID: req.ID, Model: "m", Prompt: q.Tokens, MaxTokens: max(q.Output, 1), IgnoreEOS: true})
			if err != nil {
				return fmt.Errorf("generate %d: %w", n, err)
			}
			d, err := st.Recv()
			if err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("first token %d: %w", n, err)
			}
			ttft := time.Since(t0) * scale
			rt.FirstToken(d.CachedTokens)
			for err == nil && d.Finish == engine.FinishNone {
				d, err = st.Recv()
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("stream %d: %w", n, err)
			}
			mu.Lock()
			defer mu.Unlock()
			res.PerWorker[rt.Worker.ID]++
			res.TTFTs = append(res.TTFTs, ttft)
			recs = append(recs, FleetRecord{N: n, Prompt: len(q.Tokens), Cached: d.CachedTokens, Worker: rt.Worker.ID, Arrival: q.Arrival, TTFT: ttft})
			res.CachedTokens += d.CachedTokens
			res.Prompts += len(q.Tokens)
			return nil
		}()
		if err != nil {
			mu.Lock()
			runErr = errors.Join(runErr, err)
			mu.Unlock()
		}
	}
	start := time.Now()
	if sc.Concurrency > 0 {
		next := 0
		for range sc.Concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					mu.Lock()
					if runErr != nil || next >= len(sc.Requests) {
						mu.Unlock()
						return
					}
					n := next
					next++
					mu.Unlock()
					do(n, sc.Requests[n])
				}
			}()
		}
	} else {
		for n, q := range sc.Requests {
			if d := time.Until(start.Add(q.Arrival / scale)); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					wg.Wait()
					return res, ctx.Err()
				}
			}
			wg.Add(1)
			go func() { defer wg.Done(); do(n, q) }()
		}
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	if runErr != nil {
		return res, runErr
	}
	slices.Sort(res.TTFTs)
	slices.SortFunc(recs, func(a, b FleetRecord) int { return cmp.Compare(b.TTFT, a.TTFT) })
	res.Slowest = recs[:min(len(recs), 8)]
	if n := len(res.TTFTs); n > 0 {
		var sum time.Duration
		for _, v := range res.TTFTs {
			sum += v
		}
		res.Mean = sum / time.Duration(n)
		res.P50, res.P90, res.P99 = res.TTFTs[n/2], res.TTFTs[n*9/10], res.TTFTs[min(n*99/100, n-1)]
	}
	res.Diagnostics = board.Active()
	res.PreemptionsBy = map[string]int{}
	for i, reg := range engRegs {
		mfs, err := reg.Gather()
		if err != nil {
			return res, err
		}
		for _, mf := range mfs {
			if mf.GetName() == "vllm:num_preemptions_total" {
				for _, m := range mf.GetMetric() {
					res.Preemptions += int(m.GetCounter().GetValue())
					res.PreemptionsBy[fmt.Sprint("worker-", i)] += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	if kv != nil {
		res.TTFTModels = map[string]router.TTFTModelState{}
		for id := range res.PerWorker {
			res.TTFTModels[id], _ = kv.TTFTModel(id)
		}
	}
	return res, nil
}

// randomTokens returns n token ids drawn from key (same key, same ids).
func randomTokens(key uint64, n int) []engine.Token {
	t := make([]engine.Token, n)
	for i := range t {
		t[i] = engine.Token(vocabLo + int(mix64(key^uint64(i)*0x9e3779b97f4a7c15)%vocabN))
	}
	return t
}

func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
