package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemllm/tandem/internal/backoff"
)

// Order is how one session is sent to several targets in a closed loop.
type Order string

const (
	// Alternate sends the session to each target in turn, rotating which
	// goes first. Targets never compete for shared hardware within a
	// trial, which is what comparing a worker with the frontend in front
	// of it needs. --concurrency is then the total in flight.
	Alternate Order = "alternate"
	// Parallel sends the session to every target at once: each target sees
	// the full --concurrency. Right for independent stacks.
	Parallel Order = "parallel"
)

// Options configures a run.
type Options struct {
	Targets []Target
	// Concurrency is the closed loop's number of sessions in flight.
	Concurrency int
	// Rate, when positive, makes the run open-loop: sessions arrive as a
	// Poisson process of this many per second (per target).
	Rate float64
	// Duration stops new sessions after this long; Requests after this
	// many sessions. With neither, the workload's own count ends the run.
	Duration time.Duration
	Requests int
	// NoStream sends non-streaming requests (no TTFT or ITL).
	NoStream bool
	// Timeout bounds each request; 0 is none.
	Timeout time.Duration
	Order   Order
	// Speedup divides a Scheduled workload's arrival times.
	Speedup float64
	// MaxInFlight bounds concurrent requests in an open loop (0: no
	// bound). Time spent waiting for a slot counts as latency.
	MaxInFlight  int
	WorkerHeader string
	// Warmup sends this many unrecorded sessions per target first, from
	// the workload's far index range, so connections and pools are warm.
	// Only unbounded workloads (Sessions() == 0) support it.
	Warmup int
	// Seed drives the Poisson arrivals.
	Seed     uint64
	Progress *Progress
	// Client overrides the HTTP client.
	Client *http.Client
	// Run and Label stamp records, for runs that are parts of a larger
	// experiment (several modes, several concurrency levels).
	Run         int
	LabelSuffix string
	// ProgressPrefix goes before the progress line's label only (which
	// mode, variant or trial of a larger run this is), not into records.
	ProgressPrefix string
	// ScrapeEvery, when positive, polls every target's /metrics this
	// often during the run (plus once at its start and end) and puts what
	// the server counted beside the records (Result.Server).
	ScrapeEvery time.Duration
}

// Result is one run's records.
type Result struct {
	Scenario    string        `json:"scenario"`
	Run         int           `json:"run"`
	Labels      []string      `json:"labels"`
	URLs        []string      `json:"urls"`
	Models      []string      `json:"models"`
	Concurrency int           `json:"concurrency,omitempty"`
	Rate        float64       `json:"rate,omitempty"`
	Start       time.Time     `json:"start"`
	Elapsed     time.Duration `json:"elapsed_ns"`
	Interrupted bool          `json:"interrupted,omitempty"`
	// Error is set when the run could not take place at all (a server
	// that failed to start); Records is then empty.
	Error   string   `json:"error,omitempty"`
	Records []Record `json:"-"`
	// Cancelled counts, per target, requests cut by cancelling the run.
	Cancelled []int `json:"cancelled,omitempty"`
	// SweepVar, SweepValue and SweepX place a sweep's run: the variable,
	// its value as given, and its position on the sweep's axis.
	SweepVar   string  `json:"sweep_var,omitempty"`
	SweepValue string  `json:"sweep_value,omitempty"`
	SweepX     float64 `json:"sweep_x,omitempty"`
	// Server is each target's /metrics over the run (Options.ScrapeEvery);
	// nil entries when it was not scraped.
	Server []*ServerMetrics `json:"server,omitempty"`
}

// isOpenLoop reports whether arrivals follow a schedule rather than
// completions.
func (o *Options) isOpenLoop(wl Workload) bool {
	if o.Rate > 0 {
		return true
	}
	_, sched := wl.(Scheduled)
	return sched && o.Concurrency <= 0
}

func (o *Options) validate(wl Workload) error {
	// A workload with a bad configuration (zero prefixes, an empty trace)
	// would fail inside a session; say so before any request is sent.
	if v, ok := wl.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return fmt.Errorf("%s workload: %w", wl.Name(), err)
		}
	}
	if len(o.Targets) == 0 {
		return errors.New("no target: give at least one --url")
	}
	if o.Rate < 0 || o.Concurrency < 0 || o.Requests < 0 || o.Duration < 0 || o.Speedup < 0 {
		return errors.New("rate, concurrency, requests, duration and speedup must not be negative")
	}
	if o.Rate > 0 && o.Concurrency > 0 {
		return errors.New("--rate (open loop) and --concurrency (closed loop) exclude each other")
	}
	if o.Order != "" && o.Order != Alternate && o.Order != Parallel {
		return fmt.Errorf("unknown order %q (want alternate or parallel)", o.Order)
	}
	if wl.Sessions() == 0 && o.Requests == 0 && o.Duration == 0 {
		return errors.New("the workload is unbounded: give --requests or --duration")
	}
	return nil
}

type runner struct {
	o       Options
	wl      Workload
	c       *client
	eps     []*endpoint
	origin  time.Time
	stopAt  time.Time
	seq     atomic.Int64
	sem     chan struct{}
	prog    *progressRun
	cancel  []atomic.Int64
	mu      sync.Mutex
	records []Record
}

// Run drives wl against the targets and returns every request's record.
// Requests that fail are recorded and the run goes on; Run itself fails
// only when it cannot start (bad options, a target whose model cannot be
// discovered). Cancelling ctx stops the run early with what was measured.
func Run(ctx context.Context, wl Workload, o Options) (*Result, error) {
	if err := o.validate(wl); err != nil {
		return nil, err
	}
	if o.Order == "" {
		o.Order = Alternate
	}
	if o.Speedup == 0 {
		o.Speedup = 1
	}
	conns := max(o.Concurrency, o.MaxInFlight, 64) * len(o.Targets)
	httpc := o.Client
	if httpc == nil {
		httpc = NewHTTPClient(conns)
	}
	tr, ok := wl.(textReader)
	multiTurn := ok && tr.needsText()
	r := &runner{o: o, wl: wl, c: &client{http: httpc, workerHeader: o.WorkerHeader, stream: !o.NoStream,
		needText: multiTurn, timeout: o.Timeout}}
	res := &Result{Scenario: wl.Name(), Run: o.Run, Concurrency: o.Concurrency, Rate: o.Rate}
	for i, t := range o.Targets {
		base, err := baseURL(t.URL)
		if err != nil {
			return nil, err
		}
		if t.Label == "" {
			t.Label = string(rune('A' + i%26))
		}
		t.Label += o.LabelSuffix
		if t.Model == "" {
			if t.Model, err = discoverModel(ctx, httpc, base, t.APIKey); err != nil {
				return nil, fmt.Errorf("target %s: %w (pass --model to skip discovery)", t.Label, err)
			}
		}
		r.eps = append(r.eps, &endpoint{Target: t, index: i, base: base})
		res.Labels, res.URLs, res.Models = append(res.Labels, t.Label), append(res.URLs, base), append(res.Models, t.Model)
	}
	if err := r.warmup(ctx); err != nil {
		return nil, err
	}
	if o.MaxInFlight > 0 {
		r.sem = make(chan struct{}, o.MaxInFlight)
	}
	limit := r.limit()
	total := limit * len(r.eps)
	if multiTurn {
		total = 0 // sessions have several turns: the request count is unknown
	}
	r.prog = o.Progress.begin(o.ProgressPrefix+wl.Name()+o.LabelSuffix, total, o.Duration)
	r.cancel = make([]atomic.Int64, len(r.eps))
	// The baseline scrapes come before the run's clock starts: a slow
	// /metrics must not count as the run's time.
	var scrapers []*scraper
	if o.ScrapeEvery > 0 {
		for _, ep := range r.eps {
			sc := newScraper(httpc, ep.base, ep.APIKey, o.ScrapeEvery)
			sc.baseline(ctx)
			scrapers = append(scrapers, sc)
		}
	}
	r.origin = time.Now()
	for _, sc := range scrapers {
		sc.start(ctx, r.origin)
	}
	if o.Duration > 0 {
		r.stopAt = r.origin.Add(o.Duration)
	}
	if o.isOpenLoop(wl) {
		r.openLoop(ctx, limit)
	} else {
		r.closedLoop(ctx, limit)
	}
	res.Elapsed = time.Since(r.origin)
	for _, sc := range scrapers {
		res.Server = append(res.Server, sc.stop(ctx))
	}
	for i := range r.cancel {
		res.Cancelled = append(res.Cancelled, int(r.cancel[i].Load()))
	}
	r.prog.end()
	res.Start, res.Records, res.Interrupted = r.origin, r.records, ctx.Err() != nil
	// Completion order is an accident of timing; issue order is the run.
	slices.SortFunc(res.Records, func(a, b Record) int { return a.Seq - b.Seq })
	for i := range res.Records {
		res.Records[i].Run, res.Records[i].Scenario = o.Run, wl.Name()
		if !o.isOpenLoop(wl) {
			res.Records[i].Concurrency = max(o.Concurrency, 1)
		}
	}
	return res, nil
}

// limit is the number of sessions to run (0: until the deadline).
func (r *runner) limit() int {
	n := r.wl.Sessions()
	if r.o.Requests > 0 && (n == 0 || r.o.Requests < n) {
		n = r.o.Requests
	}
	return n
}

func (r *runner) warmup(ctx context.Context) error {
	if r.o.Warmup <= 0 || r.wl.Sessions() != 0 {
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(r.eps))
	for _, ep := range r.eps {
		wg.Go(func() {
			for k := range r.o.Warmup {
				s := r.wl.NewSession(1<<30+k, ep.index)
				var prev *Reply
				for {
					req, _, ok := s.Next(prev)
					if !ok {
						break
					}
					rec, reply, _ := r.c.do(ctx, ep, req, time.Time{}, time.Now())
					if !rec.OK() {
						errs <- fmt.Errorf("warm-up request to %s failed: %s", ep.Label, rec.Error)
						return
					}
					prev = &reply
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return ctx.Err()
	}
}

func (r *runner) pastDeadline() bool {
	return !r.stopAt.IsZero() && time.Now().After(r.stopAt)
}

func (r *runner) closedLoop(ctx context.Context, limit int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(r.o.Concurrency, 1) {
		wg.Go(func() {
			for ctx.Err() == nil && !r.pastDeadline() {
				i := int(next.Add(1) - 1)
				if limit > 0 && i >= limit {
					return
				}
				r.trial(ctx, i, time.Time{})
			}
		})
	}
	wg.Wait()
}

// prepareLead is how early the open loop starts a session: enough to build
// a trace's 100k-token prompt before it is due.
const prepareLead = 10 * time.Millisecond

func (r *runner) openLoop(ctx context.Context, limit int) {
	sched, _ := r.wl.(Scheduled)
	rnd := newRNG(r.o.Seed, 77)
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	at := time.Duration(0)
	for i := 0; limit == 0 || i < limit; i++ {
		if sched != nil && r.o.Rate <= 0 {
			at = time.Duration(float64(sched.Arrival(i)) / r.o.Speedup)
		} else {
			at += time.Duration(rnd.exp() / r.o.Rate * float64(time.Second))
		}
		if r.o.Duration > 0 && at > r.o.Duration {
			return
		}
		due := r.origin.Add(at)
		if d := time.Until(due) - prepareLead; d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		} else if ctx.Err() != nil {
			return
		}
		// Sessions never wait for each other: an arrival that finds the
		// tool behind is sent at once, its latency still counted from due.
		// One that is early builds its request and waits for due itself.
		wg.Go(func() { r.trial(ctx, i, due) })
	}
}

// trial runs session i against every target.
func (r *runner) trial(ctx context.Context, i int, due time.Time) {
	n := len(r.eps)
	if n == 1 {
		r.session(ctx, i, r.eps[0], due)
		return
	}
	if due.IsZero() && r.o.Order == Alternate {
		for k := range n {
			r.session(ctx, i, r.eps[(i+k)%n], time.Time{})
		}
		return
	}
	var wg sync.WaitGroup
	for _, ep := range r.eps {
		wg.Go(func() { r.session(ctx, i, ep, due) })
	}
	wg.Wait()
}

func (r *runner) session(ctx context.Context, i int, ep *endpoint, due time.Time) {
	s := r.wl.NewSession(i, ep.index)
	var prev *Reply
	for turn := 0; ; turn++ {
		req, think, ok := s.Next(prev)
		if !ok {
			return
		}
		if turn > 0 {
			if !backoff.Sleep(ctx, think) || r.pastDeadline() {
				return
			}
			due = time.Time{} // later turns follow the reply, not the schedule
		}
		if r.sem != nil {
			select {
			case r.sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		seq := int(r.seq.Add(1) - 1)
		rec, reply, cancelled := r.c.do(ctx, ep, req, due, r.origin)
		if r.sem != nil {
			<-r.sem
		}
		if cancelled {
			r.cancel[ep.index].Add(1)
			return
		}
		rec.Seq = seq
		r.mu.Lock()
		r.records = append(r.records, rec)
		r.mu.Unlock()
		r.prog.add(rec.OK())
		prev = &reply
	}
}
