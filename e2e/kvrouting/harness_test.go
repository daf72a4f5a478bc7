package kvrouting

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/engine/upstream"
	"github.com/tandemllm/tandem/engine/upstream/standin"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/planes/kvevents"
	"github.com/tandemllm/tandem/planes/kvevents/follow"
	"github.com/tandemllm/tandem/router"
)

// The seed report's workload.
const (
	Workers         = 2
	KVCapacity      = mocker.SeedKVCapacityTokens // 14,816 tokens per worker
	Prefixes        = 12
	PrefixTokens    = 1500
	TailTokens      = 24
	Rounds          = 6
	OutputTokens    = 16
	BlockSize       = 16
	ContextLength   = 4096 // the report's --max-model-len
	vocabLo, vocabN = 1000, 30000
)

// Scenario is one run of the experiment.
type Scenario struct {
	// Mode is a --router-mode: kv, kv-approx, round-robin, random,
	// least-loaded.
	Mode string
	// Cost selects the kv cost function (kv and kv-approx).
	Cost router.CostModel
	// EventsOff lists workers (0 or 1) whose engine publishes no KV events,
	// while the router still expects them at an endpoint.
	EventsOff []int
	// Seed drives the workload (prefix contents, shuffles, tails) and the
	// router's random choices.
	Seed uint64
	// Concurrency is the number of clients sending at once (default 1, the
	// report's).
	Concurrency int
	// Speedup divides the simulated engine time (default 20).
	Speedup float64
	// Prefixes overrides the prefix count (default 12).
	Prefixes int
	// WaitForDiagnostic pauses after the first round until the router has
	// raised kv_events_missing for every events-off worker, so the later
	// rounds run in the degraded-and-reported state.
	WaitForDiagnostic bool
	// KVEventsTimeout overrides the router's (default 5 s).
	KVEventsTimeout time.Duration
	Logger          *slog.Logger
	// Upstream, when set, puts each mocker behind a vLLM look-alike HTTP
	// server (engine/upstream/standin) reached through engine/upstream,
	// with the publisher quirks it names.
	Upstream *UpstreamMode
	// ApproxTTL is the router's --router-ttl (0: the default); near 0 the
	// approximate index forgets every decision at once, so only events
	// can route.
	ApproxTTL time.Duration
}

// UpstreamMode is how the look-alike servers publish their KV events.
type UpstreamMode struct {
	Format kvevents.Format
	// Dial: the publishers dial one socket the router binds
	// (--kv-events-bind), told apart by topic.
	Dial bool
	// FirstSeq numbers the first batch; ZeroParent writes parent 0 for none.
	FirstSeq   uint64
	ZeroParent bool
	// LlamaCpp: llama-server look-alikes instead (engine/upstream/standin
	// LlamaCpp, LlamaCppSlots slots each), which publish no events; run
	// with Mode kv-approx.
	LlamaCpp      bool
	LlamaCppSlots int
	// SGLang: one SGLang look-alike with one attention-DP rank per worker
	// (engine/upstream/standin SGLang), reached through --upstream-api
	// sglang; rank r publishes at the base port + r, as SGLang does.
	SGLang bool
}

// Result is what a run measured.
type Result struct {
	Scenario   Scenario
	Requests   int
	Rerequests int
	Hits       int // re-requests whose whole prefix the engine had cached
	// Computing counts the re-requests routed while their prefix's first
	// request had not produced its first token yet (the prefix was still
	// being computed somewhere); ComputingHits, those of them that hit.
	// Hits − ComputingHits of Rerequests − Computing are the others.
	Computing, ComputingHits int
	// Of the misses not routed while computing: RoutedAway were sent to a
	// worker the router did not expect to hold the prefix; the rest were
	// sent to one it expected to (the engine had evicted or not yet
	// committed it).
	RoutedAway int
	PerRound   []int
	PerWorker  map[string]int
	// TTFTs are wall-clock times multiplied by Speedup (simulated model
	// time; Go overheads are magnified by the same factor). TTFT is over
	// all requests, Hit/Miss over re-requests.
	HitTTFT, MissTTFT time.Duration
	TTFTMean, TTFTP90 time.Duration
	Predictions       int // requests whose predicted cached blocks matched the engine's within one block
	// DiagLatency is, for events-off runs, the time from the first request
	// routed to an events-off worker to kv_events_missing for it.
	DiagLatency time.Duration
	Diagnostics []health.Diagnostic
	Health      map[string]string
	// Events is each worker's KV events applied and last age at the end.
	Events map[string]router.EventStats
	// StartHealth is each worker's KV state when the first request was
	// routed: "connecting" or "syncing" shows the first decisions raced the
	// subscriptions, as in the report's first cross-server run.
	StartHealth map[string]string
	Elapsed     time.Duration
}

func (r Result) String() string {
	return fmt.Sprintf("%d/%d hits (rounds %v, placement %v; routed while their prefix was being computed: %d, of which %d hit; other misses routed away from the prefix: %d)",
		r.Hits, r.Rerequests, r.PerRound, r.PerWorker, r.Computing, r.ComputingHits, r.RoutedAway)
}

type request struct {
	round, prefix int
	tokens        []engine.Token
	rerequest     bool
}

// workload builds the 72 requests in order: rounds of the shuffled
// prefixes, each with a fresh tail.
func workload(seed uint64, prefixes int) []request {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	words := func(n int) []engine.Token {
		t := make([]engine.Token, n)
		for i := range t {
			t[i] = engine.Token(vocabLo + rng.IntN(vocabN))
		}
		return t
	}
	pre := make([][]engine.Token, prefixes)
	for i := range pre {
		pre[i] = words(PrefixTokens)
	}
	var out []request
	for round := range Rounds {
		order := rng.Perm(prefixes)
		for _, p := range order {
			toks := append(append(make([]engine.Token, 0, PrefixTokens+TailTokens), pre[p]...), words(TailTokens)...)
			out = append(out, request{round: round, prefix: p, tokens: toks, rerequest: round > 0})
		}
	}
	return out
}

// Run executes one scenario with fresh engines and a fresh router, sending
// the first request as soon as the workers are registered: the first run
// must score like every later one, however the event subscriptions race.
func Run(ctx context.Context, sc Scenario) (Result, error) {
	if sc.Concurrency <= 0 {
		sc.Concurrency = 1
	}
	if sc.Speedup == 0 {
		sc.Speedup = 20
	}
	if sc.Prefixes == 0 {
		sc.Prefixes = Prefixes
	}
	log := sc.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	res := Result{Scenario: sc, PerRound: make([]int, Rounds), PerWorker: map[string]int{}}
	board := health.NewBoard(log, nil)

	var listener *kvevents.Listener
	if sc.Upstream != nil && sc.Upstream.Dial {
		l, err := kvevents.Listen(ctx, "tcp://127.0.0.1:0", log)
		if err != nil {
			return res, err
		}
		defer l.Close()
		listener = l
	}
	engines := make([]*mocker.Engine, Workers)
	gens := make([]engine.Generator, Workers)
	infos := make([]engine.Info, Workers)
	var sgl *standin.SGLang
	for i := range engines {
		off := contains(sc.EventsOff, i)
		cfg := mocker.Config{
			Model: "m", Seed: sc.Seed + uint64(i), BlockSize: BlockSize, KVCapacityTokens: KVCapacity,
			ContextLength: ContextLength, Timing: mocker.Qwen3_0_6BTiming(), Speedup: sc.Speedup,
			EngineLabel: fmt.Sprint(i), Logger: log,
			KVEvents: mocker.KVEventsConfig{Enabled: !off, Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"},
		}
		if u := sc.Upstream; u != nil && u.LlamaCpp {
			srv, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "m", Slots: u.LlamaCppSlots, NCtx: ContextLength,
				PrefillPerToken: 2 * time.Microsecond, DecodePerToken: 50 * time.Microsecond})
			if err != nil {
				return res, fmt.Errorf("worker %d: %w", i, err)
			}
			defer srv.Close()
			up, err := upstream.New(ctx, upstream.Config{URL: srv.URL(), API: upstream.APILlamaCpp, BlockSize: BlockSize, HealthInterval: -1, Logger: log})
			if err != nil {
				return res, fmt.Errorf("worker %d: %w", i, err)
			}
			defer up.Close()
			gens[i], infos[i] = up, up.Info()
			continue
		}
		if u := sc.Upstream; u != nil && u.SGLang {
			if sgl == nil {
				cfg.EngineLabel = ""
				srv, err := standin.StartSGLang(standin.SGLangOptions{Model: "m", Mocker: cfg, DPSize: Workers, EnableMetrics: true})
				if err != nil {
					return res, err
				}
				defer srv.Close()
				sgl = srv
			}
			// Tandem derives rank i's endpoints from the configured base
			// as SGLang does (offset_endpoint_port).
			for _, pair := range [][2]string{{sgl.Rank(0).KVEventsEndpoint(), sgl.Rank(i).KVEventsEndpoint()},
				{sgl.Rank(0).KVEventsReplayEndpoint(), sgl.Rank(i).KVEventsReplayEndpoint()}} {
				if got, err := upstream.OffsetEndpointPort(pair[0], i); err != nil || got != pair[1] {
					return res, fmt.Errorf("rank %d: endpoint %s offset to %q (%v), the rank publishes at %s", i, pair[0], got, err, pair[1])
				}
			}
			up, err := upstream.New(ctx, upstream.Config{URL: sgl.URL(), API: upstream.APISGLang, DPRank: i, BlockSize: BlockSize, HealthInterval: -1, Logger: log})
			if err != nil {
				return res, fmt.Errorf("worker %d: %w", i, err)
			}
			defer up.Close()
			engines[i], gens[i], infos[i] = sgl.Rank(i), up, up.Info()
			continue
		}
		if u := sc.Upstream; u != nil {
			cfg.KVEvents.Format, cfg.KVEvents.FirstSeq, cfg.KVEvents.ZeroParent = u.Format, u.FirstSeq, u.ZeroParent
			if u.Dial {
				cfg.KVEvents.Dial, cfg.KVEvents.Endpoint, cfg.KVEvents.Topic = true, listener.Endpoint(), fmt.Sprint("worker-", i)
			}
			srv, err := standin.Start(standin.Options{Model: "m", Mocker: cfg, ReturnTokenIDs: true, PromptTokensDetails: true})
			if err != nil {
				return res, fmt.Errorf("worker %d: %w", i, err)
			}
			defer srv.Close()
			up, err := upstream.New(ctx, upstream.Config{URL: srv.URL(), BlockSize: BlockSize, HealthInterval: -1, Logger: log})
			if err != nil {
				return res, fmt.Errorf("worker %d: %w", i, err)
			}
			defer up.Close()
			engines[i], gens[i], infos[i] = srv.Engine(), up, up.Info()
			continue
		}
		e, err := mocker.New(cfg)
		if err != nil {
			return res, fmt.Errorf("worker %d: %w", i, err)
		}
		defer e.Close()
		engines[i], gens[i], infos[i] = e, e, e.Info()
	}

	policy, kv, err := newPolicy(ctx, sc, board, log, listener)
	if err != nil {
		return res, err
	}
	if kv != nil {
		defer kv.Close()
	}
	r := router.New(policy, prometheus.NewRegistry())
	for i, e := range engines {
		id := fmt.Sprint("worker-", i)
		w := router.Worker{ID: id, Model: "m", Gen: gens[i], Info: infos[i]}
		if sc.Upstream == nil {
			w.Timing = e // in process the engine prices itself; across HTTP the router learns
		}
		r.AddWorker(w)
		if kv == nil {
			continue
		}
		var ep, replay string
		if e != nil { // nil: a server without events (llama.cpp)
			ep, replay = e.KVEventsEndpoint(), e.KVEventsReplayEndpoint()
			if t, ok := any(e).(interface{ KVEventsReplayToken() []byte }); ok {
				kv.SetReplayToken(id, t.KVEventsReplayToken())
			}
		}
		if listener != nil {
			ep = router.BoundPrefix + id
		}
		if contains(sc.EventsOff, i) {
			// The operator configured an endpoint, but the engine publishes
			// nothing there: the report's silent failure.
			if ep, err = deadEndpoint(); err != nil {
				return res, err
			}
			replay = ""
		}
		if err := kv.AddWorker(id, ep, replay, BlockSize); err != nil {
			return res, err
		}
	}

	reqs := workload(sc.Seed, sc.Prefixes)
	if kv != nil {
		res.StartHealth = kv.Health()
	}
	start := time.Now()
	var (
		mu               sync.Mutex
		hitT, missT      time.Duration
		ttfts            []time.Duration
		nHit, nMiss      int
		firstOff         time.Time
		runErr           error
		full             = PrefixTokens / BlockSize * BlockSize
		scale            = time.Duration(sc.Speedup)
		offIDs           = map[string]bool{}
		needDiag         = len(sc.EventsOff) > 0 && kv != nil
		diagDone, diagCh = false, make(chan struct{})
	)
	for _, i := range sc.EventsOff {
		offIDs[fmt.Sprint("worker-", i)] = true
	}
	if needDiag {
		go func() {
			defer close(diagCh)
			for ctx.Err() == nil {
				all := true
				for id := range offIDs {
					all = all && board.IsActive(router.DiagKVEventsMissing, id)
				}
				if all {
					mu.Lock()
					if !firstOff.IsZero() {
						res.DiagLatency = time.Since(firstOff)
					}
					mu.Unlock()
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	prefixDone := make([]bool, sc.Prefixes)
	do := func(n int, q request) error {
		req := &router.Request{ID: fmt.Sprint("req-", n), Model: "m", Tokens: q.tokens}
		mu.Lock()
		computing := q.rerequest && !prefixDone[q.prefix]
		mu.Unlock()
		rt, err := r.Route(req)
		if err != nil {
			return fmt.Errorf("route %d: %w", n, err)
		}
		defer rt.Done()
		if offIDs[rt.Worker.ID] {
			mu.Lock()
			if firstOff.IsZero() {
				firstOff = time.Now()
			}
			mu.Unlock()
		}
		t0 := time.Now()
		st, err := rt.Worker.Gen.Generate(ctx, &engine.Request{ID: req.ID, Model: "m", Prompt: q.tokens, MaxTokens: OutputTokens, IgnoreEOS: true})
		if err != nil {
			return fmt.Errorf("generate %d: %w", n, err)
		}
		d, err := st.Recv()
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("first token %d: %w", n, err)
		}
		ttft := time.Since(t0) * scale
		mu.Lock()
		prefixDone[q.prefix] = true
		mu.Unlock()
		rt.FirstToken(d.CachedTokens)
		for err == nil && d.Finish == engine.FinishNone {
			d, err = st.Recv()
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("stream %d: %w", n, err)
		}
		mu.Lock()
		defer mu.Unlock()
		res.Requests++
		res.PerWorker[rt.Worker.ID]++
		ttfts = append(ttfts, ttft)
		if pred := rt.Decision.PredictedCachedTokens / BlockSize; abs(pred-d.CachedTokens/BlockSize) <= 1 {
			res.Predictions++
		}
		if q.rerequest {
			res.Rerequests++
			if computing {
				res.Computing++
			}
			if d.CachedTokens >= full {
				res.Hits++
				if computing {
					res.ComputingHits++
				}
				res.PerRound[q.round]++
				hitT += ttft
				nHit++
			} else {
				missT += ttft
				nMiss++
				if !computing && rt.Decision.PredictedCachedTokens < full {
					res.RoutedAway++
				}
			}
		}
		return nil
	}
	// Clients take requests in order; with one client this is the report's
	// sequential run.
	next := 0
	var wg sync.WaitGroup
	round1 := sc.Prefixes
	runClients := func(upTo int) {
		for range sc.Concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					mu.Lock()
					if runErr != nil || next >= upTo {
						mu.Unlock()
						return
					}
					n := next
					next++
					mu.Unlock()
					if err := do(n, reqs[n]); err != nil {
						mu.Lock()
						runErr = errors.Join(runErr, err)
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
	}
	if sc.WaitForDiagnostic && needDiag {
		runClients(round1)
		select {
		case <-diagCh:
			diagDone = true
		case <-time.After(30 * time.Second):
			return res, errors.New("kv_events_missing never raised")
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	runClients(len(reqs))
	res.Elapsed = time.Since(start)
	if runErr != nil {
		return res, runErr
	}
	if needDiag && !diagDone {
		select {
		case <-diagCh:
		case <-time.After(10 * time.Second):
		}
	}
	if len(ttfts) > 0 {
		slices.Sort(ttfts)
		var sum time.Duration
		for _, v := range ttfts {
			sum += v
		}
		res.TTFTMean, res.TTFTP90 = sum/time.Duration(len(ttfts)), ttfts[len(ttfts)*9/10]
	}
	if nHit > 0 {
		res.HitTTFT = hitT / time.Duration(nHit)
	}
	if nMiss > 0 {
		res.MissTTFT = missT / time.Duration(nMiss)
	}
	res.Diagnostics = board.Active()
	if kv != nil {
		res.Health, res.Events = kv.Health(), kv.EventStats()
	}
	return res, nil
}

func newPolicy(ctx context.Context, sc Scenario, board *health.Board, log *slog.Logger, l *kvevents.Listener) (router.Policy, *router.KV, error) {
	cfg := router.KVConfig{BlockSize: BlockSize, Cost: sc.Cost, Seed: sc.Seed + 1, Board: board, Logger: log,
		KVEventsTimeout: sc.KVEventsTimeout, ApproxTTL: sc.ApproxTTL}
	switch sc.Mode {
	case "kv":
		fol, err := follow.New(ctx, follow.Config{Listener: l, Logger: log})
		if err != nil {
			return nil, nil, err
		}
		cfg.Streams = fol
		kv, err := router.NewKV(ctx, cfg)
		return kv, kv, err
	case "kv-approx":
		kv, err := router.NewKVApprox(ctx, cfg)
		return kv, kv, err
	case "round-robin":
		return &router.RoundRobin{}, nil, nil
	case "random":
		return router.Random{}, nil, nil
	case "least-loaded":
		return router.LeastLoaded{}, nil, nil
	}
	return nil, nil, fmt.Errorf("unknown router mode %q", sc.Mode)
}

// deadEndpoint returns a TCP endpoint on which nothing listens.
func deadEndpoint() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	l.Close()
	return "tcp://" + addr, nil
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
