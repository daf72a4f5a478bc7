package planner

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/health"
)

// Pool is one group of identical workers the planner sizes.
type Pool struct {
	Name     string
	Role     Role
	Min, Max int
}

// Observation is what one interval showed.
type Observation struct {
	At   time.Time
	Load Load
	// TTFTMs and ITLMs are the observed quantiles (Targets.Quantile) over
	// the interval; zero when nothing was measured.
	TTFTMs, ITLMs float64
	// Samples is how many requests the quantiles are over.
	Samples int
	// Replicas is each pool's current replica count (by pool name).
	Replicas map[string]int
	// QueueDepth is the frontend's requests waiting for a first token
	// and WorkerActive each worker's requests in flight (the router's
	// gauges), at the end of the interval; Workers are the workers' own
	// /metrics when scraped. The policies size from the load; these are
	// logged, exported and shown on /health to explain a decision.
	QueueDepth   float64
	WorkerActive map[string]float64
	Workers      []WorkerStats
}

// Decision is the planner's answer for one pool in one interval.
type Decision struct {
	At       time.Time
	Pool     string
	Current  int
	Proposed int // the policy's raw answer
	Desired  int // after min/max, cooldowns and the step-down limit
	// Reason is one of the Reason* constants.
	Reason string
	// Why is the constraint the policy sized for (ttft, itl, idle, min).
	Why        string
	Predicted  Load
	PredTTFTMs float64
	PredITLMs  float64
}

// Reasons of a Decision.
const (
	ReasonScaleUp    = "scale_up"
	ReasonScaleDown  = "scale_down"
	ReasonHold       = "hold"
	ReasonAtMax      = "at_max"
	ReasonAtMin      = "at_min"
	ReasonCooldown   = "cooldown"
	ReasonStepLimit  = "step_limit"
	ReasonNoEvidence = "no_evidence"
)

// Diagnostic codes raised by the planner.
const (
	CodeAtMax          = "planner_at_max"
	CodeBelowMax       = "planner_below_max"
	CodeObserveFailed  = "planner_observe_failed"
	CodeObserved       = "planner_observed"
	CodeActuateFailed  = "planner_actuate_failed"
	CodeActuated       = "planner_actuated"
	boardSubjectPrefix = "pool:"
)

// Config configures a Planner.
type Config struct {
	Pools   []Pool
	Targets Targets
	Policy  Policy
	// Profiles gives each pool's profile by name; Profile is the default.
	Profile  *Profile
	Profiles map[string]*Profile
	// ProfileSource, if set, is asked at every Step for a newer default
	// profile (ProfileLearner.Profile while serving); a nil result keeps
	// the current one. Pools with their own entry in Profiles keep it.
	ProfileSource func() *Profile
	// NewPredictor builds one predictor per load series.
	NewPredictor func() Predictor
	Interval     time.Duration
	// Startup is how long a new worker takes to serve (the policy plans
	// that far ahead).
	Startup time.Duration
	// UpCooldown and DownCooldown are the least time between a change of
	// a pool and the next scale-up or scale-down of it.
	UpCooldown, DownCooldown time.Duration
	Logger                   *slog.Logger
	Board                    *health.Board
	Registerer               prometheus.Registerer
}

type poolState struct {
	Pool
	model      *Model
	ownProfile bool // from Profiles: ProfileSource does not replace it
	lastChange time.Time
	changed    bool
	desired    int
}

// Planner turns observations into decisions. It is not safe for
// concurrent use; Run drives it from one goroutine.
type Planner struct {
	cfg                 Config
	pools               []*poolState
	rate, isl, osl, hit Predictor
	tail                Predictor
	met                 *metrics
	log                 *slog.Logger
	startupIntervals    float64
	observedOnce        bool
}

// New validates cfg and builds a planner.
func New(cfg Config) (*Planner, error) {
	if len(cfg.Pools) == 0 {
		return nil, errors.New("planner: no pools")
	}
	if cfg.Policy == nil {
		return nil, errors.New("planner: no policy")
	}
	if !(cfg.Targets.TTFTMs > 0 && cfg.Targets.ITLMs > 0 && cfg.Targets.Quantile >= 0.5 && cfg.Targets.Quantile < 1) {
		return nil, fmt.Errorf("planner: targets ttft %v ms, itl %v ms, quantile %v: want positive targets and a quantile in [0.5, 1)", cfg.Targets.TTFTMs, cfg.Targets.ITLMs, cfg.Targets.Quantile)
	}
	if cfg.Interval <= 0 {
		return nil, errors.New("planner: interval must be positive")
	}
	if cfg.NewPredictor == nil {
		cfg.NewPredictor = func() Predictor { return &Constant{last: math.NaN()} }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Planner{cfg: cfg, log: cfg.Logger, met: newMetrics(cfg.Registerer)}
	p.rate, p.isl, p.osl, p.hit = cfg.NewPredictor(), cfg.NewPredictor(), cfg.NewPredictor(), cfg.NewPredictor()
	// The tail ratio is a shape, not a level: a trend in it means nothing,
	// so it is averaged.
	p.tail = &MovingAverage{Window: 6}
	p.startupIntervals = cfg.Startup.Seconds() / cfg.Interval.Seconds()
	seen := map[string]bool{}
	for _, pl := range cfg.Pools {
		if pl.Name == "" || seen[pl.Name] {
			return nil, fmt.Errorf("planner: pool name %q empty or repeated", pl.Name)
		}
		seen[pl.Name] = true
		if pl.Min < 0 || pl.Max < pl.Min || pl.Max > 1<<16 {
			return nil, fmt.Errorf("planner: pool %s: min %d, max %d: want 0 ≤ min ≤ max ≤ 65536", pl.Name, pl.Min, pl.Max)
		}
		prof := cfg.Profile
		q := cfg.Profiles[pl.Name]
		if q != nil {
			prof = q
		}
		if prof == nil {
			return nil, fmt.Errorf("planner: pool %s has no profile", pl.Name)
		}
		p.pools = append(p.pools, &poolState{Pool: pl, model: NewModel(prof), ownProfile: q != nil, desired: -1})
	}
	return p, nil
}

// Pools returns the configured pools.
func (p *Planner) Pools() []Pool {
	out := make([]Pool, len(p.pools))
	for i, s := range p.pools {
		out[i] = s.Pool
	}
	return out
}

// Corrections returns each pool's current correction factors.
func (p *Planner) Corrections() map[string][2]float64 {
	out := map[string][2]float64{}
	for _, s := range p.pools {
		out[s.Name] = [2]float64{s.model.PCorr, s.model.DCorr}
	}
	return out
}

// Step feeds one interval's observation and returns one decision per pool.
func (p *Planner) Step(o Observation) []Decision {
	if p.cfg.ProfileSource != nil {
		if np := p.cfg.ProfileSource(); np != nil {
			// The correction factors stay: they measure what the profile
			// leaves out (queueing, HTTP), which a learned profile leaves
			// out too.
			for _, s := range p.pools {
				if !s.ownProfile {
					s.model.Profile = np
				}
			}
		}
	}
	// Each series takes what the interval measured; a mean over no
	// requests (NaN: nothing finished, nothing reported cached tokens) is
	// skipped by Observe, so the series keeps its last level.
	seen := usable(o.Load.Rate) && o.Load.Rate >= 0
	if seen {
		p.rate.Observe(o.Load.Rate)
		if o.Load.Rate > 0 {
			p.isl.Observe(o.Load.ISL)
			p.osl.Observe(o.Load.OSL)
			p.hit.Observe(o.Load.HitFrac)
			if o.Load.ISLTail >= 1 {
				p.tail.Observe(o.Load.ISLTail)
			}
		}
		p.observedOnce = true
		// The corrections compare the interval's latencies with the
		// model at its load; a length it did not measure is the level
		// the planner holds for it.
		lv := p.predict(1)
		if !usable(o.Load.OSL) {
			o.Load.OSL = lv.OSL
		}
		if !usable(o.Load.HitFrac) {
			o.Load.HitFrac = lv.HitFrac
		}
	}
	h := p.cfg.Policy.Horizon(p.startupIntervals)
	pred := p.predict(1)
	if h > 1 {
		// Plan for the busiest of the next interval, the moment a worker
		// started now could serve, and the interval just seen: a trend
		// that turns down must not take away workers the load still needs.
		if far := p.predict(h); far.Rate > pred.Rate {
			pred.Rate = far.Rate
		}
		if seen && o.Load.Rate > pred.Rate {
			pred.Rate = o.Load.Rate
		}
	}
	pred.Window = p.cfg.Interval.Seconds()
	p.met.queue.Set(o.QueueDepth)
	if o.WorkerActive != nil {
		// Workers come and go with scaling: the gauge holds the ones seen.
		p.met.workerActive.Reset()
		for w, v := range o.WorkerActive {
			p.met.workerActive.WithLabelValues(w).Set(v)
		}
	}
	p.met.rate.Set(pred.Rate)
	p.met.isl.Set(pred.ISL)
	p.met.osl.Set(pred.OSL)
	var out []Decision
	for _, s := range p.pools {
		cur := o.Replicas[s.Name]
		p.cfg.Policy.Correct(s.Pool, o, cur, p.cfg.Targets, s.model)
		d := Decision{At: o.At, Pool: s.Name, Current: cur, Predicted: pred}
		if !p.observedOnce || !pred.valid() {
			d.Proposed, d.Desired, d.Reason = cur, min(max(cur, s.Min), s.Max), ReasonNoEvidence
		} else {
			sz := p.cfg.Policy.Size(s.Pool, pred, p.cfg.Targets, s.model, s.Max+1)
			d.Proposed, d.Why, d.PredTTFTMs, d.PredITLMs = sz.Replicas, sz.Why, sz.PredTTFTMs, sz.PredITLM
			d.Desired, d.Reason = p.constrain(s, cur, sz.Replicas, o.At)
		}
		if d.Desired != cur {
			s.lastChange, s.changed = o.At, true
		}
		s.desired = d.Desired
		p.report(s, d)
		out = append(out, d)
	}
	return out
}

// predict is the load h ≥ 1 intervals ahead.
func (p *Planner) predict(h int) Load {
	l := Load{Rate: p.rate.Predict(h), ISL: p.isl.Predict(h), OSL: p.osl.Predict(h), HitFrac: p.hit.Predict(h), ISLTail: p.tail.Predict(h)}
	if math.IsNaN(l.ISLTail) {
		l.ISLTail = 1
	}
	switch {
	case math.IsNaN(l.ISL):
		// No request seen yet: the lengths do not matter while idle.
		l.ISL, l.OSL = 0, 0
	case math.IsNaN(l.OSL):
		// Requests arrived, none finished (a pool scaled to zero cannot
		// finish any): size for the prompts, decode at its least.
		l.OSL = 0
	}
	if math.IsNaN(l.HitFrac) {
		l.HitFrac = 0
	}
	l.HitFrac = min(max(l.HitFrac, 0), 0.99)
	l.ISL, l.OSL = max(l.ISL, 0), max(l.OSL, 0)
	return l
}

// constrain applies min/max, cooldowns and the one-step-down rule.
func (p *Planner) constrain(s *poolState, cur, want int, now time.Time) (int, string) {
	since := now.Sub(s.lastChange)
	switch {
	case want > s.Max:
		if cur >= s.Max {
			return s.Max, ReasonAtMax
		}
		if s.changed && since < p.cfg.UpCooldown {
			return cur, ReasonCooldown
		}
		return s.Max, ReasonAtMax
	case want < s.Min:
		want = s.Min
		if cur <= s.Min {
			return s.Min, ReasonAtMin
		}
	}
	switch {
	case want > cur:
		if s.changed && since < p.cfg.UpCooldown {
			return cur, ReasonCooldown
		}
		return want, ReasonScaleUp
	case want < cur:
		if s.changed && since < p.cfg.DownCooldown {
			return cur, ReasonCooldown
		}
		if want < cur-1 {
			// One step down per interval: a mistaken forecast costs one
			// worker, and each removal drains before the next.
			return cur - 1, ReasonStepLimit
		}
		return want, ReasonScaleDown
	}
	return cur, ReasonHold
}

func (p *Planner) report(s *poolState, d Decision) {
	m := p.met
	m.current.WithLabelValues(s.Name).Set(float64(d.Current))
	m.desired.WithLabelValues(s.Name).Set(float64(d.Desired))
	m.decisions.WithLabelValues(s.Name, d.Reason).Inc()
	m.pcorr.WithLabelValues(s.Name).Set(s.model.PCorr)
	m.dcorr.WithLabelValues(s.Name).Set(s.model.DCorr)
	atMax := d.Reason == ReasonAtMax && d.Proposed > s.Max
	if atMax {
		m.atMax.WithLabelValues(s.Name).Set(1)
	} else {
		m.atMax.WithLabelValues(s.Name).Set(0)
	}
	if b := p.cfg.Board; b != nil {
		subj := boardSubjectPrefix + s.Name
		if atMax {
			b.Raise(CodeAtMax, subj, health.Warn,
				fmt.Sprintf("pool %s needs %d workers for the targets but is held at its max of %d", s.Name, d.Proposed, s.Max),
				"pool", s.Name, "proposed", d.Proposed, "max", s.Max)
		} else {
			b.Clear(CodeAtMax, subj, CodeBelowMax, fmt.Sprintf("pool %s fits within its max of %d", s.Name, s.Max))
		}
	}
	level := slog.LevelDebug
	if d.Desired != d.Current || d.Reason == ReasonAtMax {
		level = slog.LevelInfo
	}
	p.log.Log(nil, level, "planner decision", "pool", s.Name, "current", d.Current, "proposed", d.Proposed,
		"desired", d.Desired, "reason", d.Reason, "sized_for", d.Why,
		"rate", round3(d.Predicted.Rate), "isl", round3(d.Predicted.ISL), "osl", round3(d.Predicted.OSL),
		"hit", round3(d.Predicted.HitFrac), "pred_ttft_ms", round3(d.PredTTFTMs), "pred_itl_ms", round3(d.PredITLMs),
		"pcorr", round3(s.model.PCorr), "dcorr", round3(s.model.DCorr))
}

func round3(v float64) float64 {
	if !usable(v) {
		return v
	}
	return math.Round(v*1000) / 1000
}

type metrics struct {
	current, desired, atMax, pcorr, dcorr *prometheus.GaugeVec
	decisions                             *prometheus.CounterVec
	rate, isl, osl                        prometheus.Gauge
	observeFail, actuateFail              prometheus.Counter
	queue                                 prometheus.Gauge
	workerActive                          *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	g := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	m := &metrics{
		current:   g("tandem_planner_replicas_current", "Replicas of the pool when the planner last looked.", "pool"),
		desired:   g("tandem_planner_replicas_desired", "Replicas the planner wants for the pool.", "pool"),
		atMax:     g("tandem_planner_pool_at_max", "1 while the pool needs more workers than its --max and is held there.", "pool"),
		pcorr:     g("tandem_planner_ttft_correction", "Observed over predicted TTFT, smoothed (the prefill correction factor).", "pool"),
		dcorr:     g("tandem_planner_itl_correction", "Observed over predicted ITL, smoothed (the decode correction factor).", "pool"),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tandem_planner_decisions_total", Help: "Planner decisions by pool and reason."}, []string{"pool", "reason"}),
		rate:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "tandem_planner_predicted_request_rate", Help: "Predicted requests per second the pools are sized for."}),
		isl:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "tandem_planner_predicted_input_tokens", Help: "Predicted mean prompt length."}),
		osl:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "tandem_planner_predicted_output_tokens", Help: "Predicted mean output length."}),
		observeFail: prometheus.NewCounter(prometheus.CounterOpts{Name: "tandem_planner_observe_failures_total",
			Help: "Intervals whose metrics could not be read."}),
		actuateFail: prometheus.NewCounter(prometheus.CounterOpts{Name: "tandem_planner_actuate_failures_total",
			Help: "Scale operations that failed."}),
		queue: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tandem_planner_observed_queue_depth",
			Help: "Requests waiting for their first token at the frontend when the planner last looked."}),
		workerActive: g("tandem_planner_observed_worker_active_requests", "A worker's requests in flight (the router's gauge) when the planner last looked.", "worker"),
	}
	if reg != nil {
		reg.MustRegister(m.current, m.desired, m.atMax, m.pcorr, m.dcorr, m.decisions, m.rate, m.isl, m.osl, m.observeFail, m.actuateFail,
			m.queue, m.workerActive)
	}
	return m
}

// Initial sizes every pool for load before any observation (a deployment
// brought up with its expected traffic), within each pool's min and max.
func (p *Planner) Initial(l Load) map[string]int {
	out := map[string]int{}
	for _, s := range p.pools {
		n := s.Min
		if l.valid() && l.Rate > 0 {
			n = p.cfg.Policy.Size(s.Pool, l, p.cfg.Targets, s.model, s.Max+1).Replicas
		}
		out[s.Name] = min(max(n, s.Min), s.Max)
	}
	return out
}
