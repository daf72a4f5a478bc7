package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/tandemllm/tandem/control/planner"
)

// Scaling is how a planned run scales: policy, predictor, limits,
// cooldowns.
type Scaling struct {
	Policy, Predictor string
	// Window is the moving average's; Alpha and Beta are Holt's.
	Window                   int
	Alpha, Beta              float64
	Min, Max                 int
	UpCooldown, DownCooldown time.Duration
	// TargetScale, when in (0, 1), multiplies the targets the planner
	// sizes for (attainment is still judged on the run's): a baseline
	// tuned with headroom until it meets the service level.
	TargetScale float64
}

// Pools returns the planner pools of a simulation.
func (c Config) Pools(min, max int) []planner.Pool {
	if c.Disagg {
		return []planner.Pool{{Name: PoolPrefill, Role: planner.RolePrefill, Min: min, Max: max},
			{Name: PoolDecode, Role: planner.RoleDecode, Min: min, Max: max}}
	}
	return []planner.Pool{{Name: PoolAgg, Role: planner.RoleAggregated, Min: min, Max: max}}
}

// NewPlanner builds the planner a simulated run uses.
func (c Config) NewPlanner(s Scaling, prof *planner.Profile) (*planner.Planner, error) {
	pol, err := planner.NewPolicy(s.Policy)
	if err != nil {
		return nil, err
	}
	if _, err := planner.NewPredictor(s.Predictor, s.Window, s.Alpha, s.Beta); err != nil {
		return nil, err
	}
	t := c.Targets
	if s.TargetScale > 0 && s.TargetScale < 1 {
		t.TTFTMs *= s.TargetScale
		t.ITLMs *= s.TargetScale
	}
	return planner.New(planner.Config{
		Pools: c.Pools(s.Min, s.Max), Targets: t, Policy: pol, Profile: prof,
		NewPredictor: func() planner.Predictor {
			p, _ := planner.NewPredictor(s.Predictor, s.Window, s.Alpha, s.Beta)
			return p
		},
		Interval: c.Interval, Startup: c.Startup, UpCooldown: s.UpCooldown, DownCooldown: s.DownCooldown,
		Logger: discard,
	})
}

// Row is one variant of a comparison.
type Row struct {
	Name string `json:"name"`
	// Static is the fixed replicas of a static row.
	Static map[string]int `json:"static,omitempty"`
	*Result
	// VsPeak is the worker-seconds over the static-peak row's.
	VsPeak float64 `json:"worker_seconds_vs_peak"`
}

// Comparison is planner vs baselines on one trace.
type Comparison struct {
	Title   string
	Config  Config
	Profile *planner.Profile
	Rows    []Row
}

// Compare runs each scaling in plans, then static deployments sized for
// the peak and for the mean of the first plan's replicas (what that
// planner found the trace needs at its busiest and on average).
func Compare(title string, trace []Request, cfg Config, prof *planner.Profile, plans map[string]Scaling, order []string) (*Comparison, error) {
	cmp := &Comparison{Title: title, Config: cfg, Profile: prof}
	var first *Result
	for _, name := range order {
		s := plans[name]
		p, err := cfg.NewPlanner(s, prof)
		if err != nil {
			return nil, err
		}
		c := cfg
		c.Planner = p
		c.Static = p.Initial(FirstLoad(trace, cfg.Interval, cfg.Targets.Quantile))
		r, err := Run(trace, c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if first == nil {
			first = r
		}
		cmp.Rows = append(cmp.Rows, Row{Name: name, Result: r})
	}
	if first == nil {
		return nil, fmt.Errorf("sim: no planned variant")
	}
	peak, mean := map[string]int{}, map[string]int{}
	for _, pl := range cfg.Pools(0, 0) {
		hi, sum, n := 0, 0.0, 0
		for _, pt := range first.Timeline {
			hi = max(hi, pt.Replicas[pl.Name])
			sum += float64(pt.Replicas[pl.Name])
			n++
		}
		peak[pl.Name] = max(hi, 1)
		mean[pl.Name] = max(int(math.Round(sum/float64(max(n, 1)))), 1)
	}
	for _, st := range []struct {
		name string
		n    map[string]int
	}{{"static-peak", peak}, {"static-mean", mean}} {
		c := cfg
		c.Planner, c.Static = nil, st.n
		r, err := Run(trace, c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", st.name, err)
		}
		cmp.Rows = append(cmp.Rows, Row{Name: st.name, Static: st.n, Result: r})
	}
	for i := range cmp.Rows {
		cmp.Rows[i].VsPeak = cmp.vsPeak(cmp.Rows[i].Result)
	}
	return cmp, nil
}

// vsPeak is r's worker-seconds over the static-peak row's (0 without one).
func (c *Comparison) vsPeak(r *Result) float64 {
	for _, x := range c.Rows {
		if x.Name == "static-peak" && x.TotalWorkerSecond > 0 {
			return r.TotalWorkerSecond / x.TotalWorkerSecond
		}
	}
	return 0
}

// Tuned runs s with its planner's targets tightened in steps of 0.05 from
// 1 down to 0.2 until the run meets attainment, and adds that run to the
// comparison as name (targets ×scale): the worker-seconds a policy needs
// once it is tuned to meet the service level, which is how a baseline
// that misses it is compared fairly. It returns the scale, 0 if none met
// it (the last run is added then).
func (c *Comparison) Tuned(name string, trace []Request, s Scaling, attainment float64) (float64, error) {
	var r *Result
	scale := 1.0
	for ; scale >= 0.2-1e-9; scale -= 0.05 {
		s.TargetScale = scale
		p, err := c.Config.NewPlanner(s, c.Profile)
		if err != nil {
			return 0, err
		}
		cfg := c.Config
		cfg.Planner = p
		cfg.Static = p.Initial(FirstLoad(trace, cfg.Interval, cfg.Targets.Quantile))
		if r, err = Run(trace, cfg); err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		if r.Attainment >= attainment {
			break
		}
	}
	c.Rows = append(c.Rows, Row{Name: fmt.Sprintf("%s (targets ×%.2f)", name, max(scale, 0.2)), Result: r, VsPeak: c.vsPeak(r)})
	if r.Attainment < attainment {
		return 0, nil
	}
	return scale, nil
}

// Table renders the comparison as a Markdown table.
func (c *Comparison) Table() string {
	s := "| variant | attainment (both) | TTFT met | ITL met | p" + fmt.Sprint(math.Round(c.Config.Targets.Quantile*100)) +
		" TTFT ms | p" + fmt.Sprint(math.Round(c.Config.Targets.Quantile*100)) + " ITL ms | worker-seconds | vs static-peak |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n"
	for _, r := range c.Rows {
		n := float64(max(r.Requests, 1))
		name := r.Name
		if r.Static != nil {
			name += " " + fmtStatic(r.Static)
		}
		s += fmt.Sprintf("| %s | %.1f%% | %.1f%% | %.1f%% | %.0f | %.1f | %.0f | %.2f |\n", name, 100*r.Attainment,
			100*float64(r.MetTTFT)/n, 100*float64(r.MetITL)/n, r.TTFTp, r.ITLp, r.TotalWorkerSecond, r.VsPeak)
	}
	return s
}

// FirstLoad is the load of the trace's first interval: what a deployment
// is brought up for before the planner has observed anything.
func FirstLoad(trace []Request, interval time.Duration, q float64) planner.Load {
	var l planner.Load
	var isls []float64
	t0 := math.Inf(1)
	for _, r := range trace {
		t0 = min(t0, r.At)
	}
	for _, r := range trace {
		if r.At-t0 < interval.Seconds() {
			l.Rate++
			l.ISL += float64(r.ISL)
			l.OSL += float64(r.OSL)
			isls = append(isls, float64(r.ISL))
		}
	}
	if l.Rate == 0 {
		return l
	}
	l.ISL /= l.Rate
	l.OSL /= l.Rate
	l.ISLTail = quantile(isls, q) / l.ISL
	l.Rate /= interval.Seconds()
	return l
}
