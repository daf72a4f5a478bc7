package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/tandemllm/tandem/planner"
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
	return planner.New(planner.Config{
		Pools: c.Pools(s.Min, s.Max), Targets: c.Targets, Policy: pol, Profile: prof,
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
	var peakWS float64
	for _, r := range cmp.Rows {
		if r.Name == "static-peak" {
			peakWS = r.TotalWorkerSecond
		}
	}
	for i := range cmp.Rows {
		if peakWS > 0 {
			cmp.Rows[i].VsPeak = cmp.Rows[i].TotalWorkerSecond / peakWS
		}
	}
	return cmp, nil
}

// Table renders the comparison as a Markdown table.
func (c *Comparison) Table() string {
	s := "| variant | attainment (both) | TTFT met | ITL met | p" + fmt.Sprint(math.Round(c.Config.Targets.Quantile*100)) +
		" TTFT ms | p" + fmt.Sprint(math.Round(c.Config.Targets.Quantile*100)) + " ITL ms | worker-seconds | vs static-peak |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n"
	for _, r := range c.Rows {
		n := float64(max(r.Requests, 1))
		name := r.Name
		if r.Static != nil {
			name += fmt.Sprintf(" %v", r.Static)
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
