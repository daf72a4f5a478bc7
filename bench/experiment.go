package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"
)

// ExperimentSpec is the file `tandem bench experiment` reads: a base
// deployment, the one variable that changes and its values, the workload,
// the SLO and the number of trials. A hands-on report on NVIDIA Dynamo puts
// the rule this enforces plainly: changing several things at once
// "produces a demo, not an attribution-quality benchmark".
//
//	name: disagg-never-vs-auto
//	base:
//	  serve: {prefill-workers: 1, decode-workers: 1, router-mode: kv, timing: qwen3-0.6b}
//	variable: disagg
//	values: [never, auto]
//	workload: {input: 1024, output: 64, concurrency: 4, requests: 24}
//	slo: ttft=500ms,itl=50ms
//	trials: 3
//	cost_per_worker_hour: 1.5
type ExperimentSpec struct {
	Name string     `yaml:"name"`
	Base Deployment `yaml:"base"`
	// Variable is the one thing that differs: a `tandem serve` flag when
	// bench starts the variants, any name when they are URLs.
	Variable yaml.Node `yaml:"variable"`
	// Values is the short form: one started variant per value.
	Values []string `yaml:"values"`
	// Variants is the long form, for URLs or own names and costs.
	Variants []Variant    `yaml:"variants"`
	Workload WorkloadSpec `yaml:"workload"`
	SLO      string       `yaml:"slo"`
	Trials   int          `yaml:"trials"`
	// CostPerWorkerHour prices a variant without its own cost by its
	// "workers" resource.
	CostPerWorkerHour float64 `yaml:"cost_per_worker_hour"`
	Seed              uint64  `yaml:"seed"`
}

// Deployment is a server to measure: one bench points at (URL) or one it
// starts (Serve: `tandem serve` flags, names without the dashes).
type Deployment struct {
	URL   string            `yaml:"url"`
	Serve map[string]string `yaml:"serve"`
	// Resources is what the deployment uses (workers, GPUs...); bench
	// derives it for started servers and needs it for URLs.
	Resources   map[string]float64 `yaml:"resources"`
	CostPerHour float64            `yaml:"cost_per_hour"`
	// Config describes a URL deployment (engine, model, router, ...) so
	// bench can check that URL variants differ in the variable alone, as
	// it checks started ones by their flags.
	Config map[string]string `yaml:"config"`
}

// Variant is one value of the variable.
type Variant struct {
	Name       string `yaml:"name"`
	Value      string `yaml:"value"`
	Deployment `yaml:",inline"`
}

// WorkloadSpec is the load each variant gets.
type WorkloadSpec struct {
	Kind        string  `yaml:"kind"` // synthetic (default) or multi-turn
	Endpoint    string  `yaml:"endpoint"`
	Input       string  `yaml:"input"`
	Output      string  `yaml:"output"`
	PrefixRatio float64 `yaml:"prefix_ratio"`
	Turns       string  `yaml:"turns"`
	Think       string  `yaml:"think"`
	Concurrency int     `yaml:"concurrency"`
	Rate        float64 `yaml:"rate"`
	Requests    int     `yaml:"requests"`
	Duration    string  `yaml:"duration"`
	Warmup      int     `yaml:"warmup"`
}

// ParseExperiment reads an experiment file strictly: an unknown key is an
// error, not a silently ignored typo.
func ParseExperiment(r io.Reader) (*ExperimentSpec, error) {
	b, err := io.ReadAll(io.LimitReader(r, 1<<20+1))
	if err != nil {
		return nil, fmt.Errorf("reading the experiment: %w", err)
	}
	if len(b) > 1<<20 {
		return nil, errors.New("the experiment file is over 1 MiB")
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var s ExperimentSpec
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("experiment file: %w", err)
	}
	if s.Trials == 0 {
		s.Trials = 3
	}
	return &s, nil
}

// VariableName is the spec's one variable; a list or a map of them is
// refused.
func (s *ExperimentSpec) VariableName() (string, error) {
	switch s.Variable.Kind {
	case 0:
		return "", errors.New("experiment: name the one thing that changes (variable: NAME)")
	case yaml.ScalarNode:
		if v := strings.TrimSpace(s.Variable.Value); v != "" {
			return strings.TrimLeft(v, "-"), nil
		}
		return "", errors.New("experiment: variable is empty")
	case yaml.SequenceNode:
		return "", fmt.Errorf("experiment: variable lists %d things; an experiment changes one (run one experiment per variable)", len(s.Variable.Content))
	}
	return "", errors.New("experiment: variable must be one name")
}

// VariantPlan is a variant ready to run.
type VariantPlan struct {
	Name        string             `json:"name"`
	Value       string             `json:"value"`
	URL         string             `json:"url,omitempty"`
	Serve       map[string]string  `json:"serve,omitempty"`
	Resources   map[string]float64 `json:"resources"`
	CostPerHour float64            `json:"cost_per_hour"`
	Config      map[string]string  `json:"config,omitempty"`
}

// ResourceFunc tells what a started deployment would use, and whether
// flag changes resources (then the resources may differ: they are the
// variable).
type ResourceFunc func(serve map[string]string) (map[string]float64, error)

// Plan resolves the variants and checks the experiment changes exactly
// one thing at equal resources (unless resources are the variable).
// resourceFlags are the serve flags that change resources.
func (s *ExperimentSpec) Plan(resources ResourceFunc, resourceFlags []string) ([]VariantPlan, error) {
	v, err := s.VariableName()
	if err != nil {
		return nil, err
	}
	if s.Trials < 1 || s.Trials > 100 {
		return nil, fmt.Errorf("experiment: trials %d must be in [1, 100]", s.Trials)
	}
	if !(s.CostPerWorkerHour >= 0) || math.IsInf(s.CostPerWorkerHour, 0) || !(s.Base.CostPerHour >= 0) || math.IsInf(s.Base.CostPerHour, 0) {
		return nil, errors.New("experiment: costs must be non-negative numbers")
	}
	vs := s.Variants
	if len(s.Values) > 0 {
		if len(vs) > 0 {
			return nil, errors.New("experiment: give values or variants, not both")
		}
		for _, val := range s.Values {
			vs = append(vs, Variant{Value: val})
		}
	}
	if len(vs) < 2 {
		return nil, fmt.Errorf("experiment: %d variant(s); a comparison needs two or more values of %s", len(vs), v)
	}
	var plans []VariantPlan
	seen := map[string]bool{}
	for i, x := range vs {
		p := VariantPlan{Name: x.Name, Value: x.Value, CostPerHour: x.CostPerHour}
		if p.Name == "" {
			p.Name = v + "=" + x.Value
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("experiment: two variants are called %q", p.Name)
		}
		seen[p.Name] = true
		if p.CostPerHour == 0 {
			p.CostPerHour = s.Base.CostPerHour
		}
		if p.CostPerHour < 0 || math.IsNaN(p.CostPerHour) || math.IsInf(p.CostPerHour, 0) {
			return nil, fmt.Errorf("experiment: variant %s: cost_per_hour must be a non-negative number", p.Name)
		}
		url := x.URL
		if url == "" {
			url = s.Base.URL
		}
		switch {
		case url != "":
			if len(x.Serve) > 0 || len(s.Base.Serve) > 0 {
				return nil, fmt.Errorf("experiment: variant %s has both a url and serve flags", p.Name)
			}
			if x.URL == "" && i > 0 {
				return nil, fmt.Errorf("experiment: variant %s points at the base url: give each variant its own", p.Name)
			}
			p.URL, p.Resources = url, x.Resources
			if len(p.Resources) == 0 {
				p.Resources = s.Base.Resources
			}
			p.Config = maps.Clone(s.Base.Config)
			if p.Config == nil {
				p.Config = map[string]string{}
			}
			maps.Copy(p.Config, x.Config)
			if x.Value != "" {
				if cv, ok := x.Config[v]; ok && cv != x.Value {
					return nil, fmt.Errorf("experiment: variant %s sets config %s to %q and its value to %q", p.Name, v, cv, x.Value)
				}
				p.Config[v] = x.Value
			}
			if len(p.Resources) == 0 {
				return nil, fmt.Errorf("experiment: variant %s is a URL: say what it uses (resources: {workers: N})", p.Name)
			}
		default:
			if x.Value == "" {
				return nil, fmt.Errorf("experiment: variant %s has no value for %s", p.Name, v)
			}
			p.Serve = maps.Clone(s.Base.Serve)
			if p.Serve == nil {
				p.Serve = map[string]string{}
			}
			for k, val := range x.Serve {
				k = strings.TrimLeft(k, "-")
				if k != v {
					return nil, fmt.Errorf("experiment: variant %s changes %s as well as %s; an experiment changes one thing", p.Name, k, v)
				}
				if val != x.Value {
					return nil, fmt.Errorf("experiment: variant %s sets %s to %q and its value to %q", p.Name, k, val, x.Value)
				}
			}
			p.Serve[v] = x.Value
			if resources == nil {
				return nil, errors.New("experiment: this bench cannot start servers; give each variant a url")
			}
			if p.Resources, err = resources(p.Serve); err != nil {
				return nil, fmt.Errorf("experiment: variant %s: %w", p.Name, err)
			}
		}
		if p.CostPerHour == 0 && s.CostPerWorkerHour > 0 {
			p.CostPerHour = s.CostPerWorkerHour * p.Resources["workers"]
		}
		plans = append(plans, p)
	}
	// Described URL deployments must differ in the variable alone.
	for _, p := range plans[1:] {
		for _, k := range slices.Sorted(maps.Keys(mergeKeys(p.Config, plans[0].Config))) {
			if k != v && p.Config[k] != plans[0].Config[k] {
				return nil, fmt.Errorf("experiment: %s and %s differ in %s as well as %s; an experiment changes one thing", p.Name, plans[0].Name, k, v)
			}
		}
	}
	if !slices.Contains(resourceFlags, v) && v != "resources" {
		for _, p := range plans[1:] {
			if !maps.Equal(p.Resources, plans[0].Resources) {
				return nil, fmt.Errorf("experiment: %s uses %s but %s uses %s; variants must use equal resources unless resources are the variable",
					p.Name, resText(p.Resources), plans[0].Name, resText(plans[0].Resources))
			}
		}
	}
	return plans, nil
}

// mergeKeys is the union of two maps' keys.
func mergeKeys(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func resText(m map[string]float64) string {
	ks := slices.Sorted(maps.Keys(m))
	var parts []string
	for _, k := range ks {
		parts = append(parts, k+"="+strconv.FormatFloat(m[k], 'g', -1, 64))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// Build returns the workload and the load options of the spec.
func (w WorkloadSpec) Build(seed uint64) (Workload, Options, error) {
	var o Options
	dist := func(s, def string) (Dist, error) {
		if s == "" {
			s = def
		}
		return ParseDist(s)
	}
	ep, err := ParseEndpoint(cmp(w.Endpoint, "chat"))
	if err != nil {
		return nil, o, err
	}
	in, err := dist(w.Input, "512")
	if err != nil {
		return nil, o, fmt.Errorf("workload input: %w", err)
	}
	out, err := dist(w.Output, "128")
	if err != nil {
		return nil, o, fmt.Errorf("workload output: %w", err)
	}
	var wl interface {
		Workload
		Validate() error
	}
	switch cmp(w.Kind, "synthetic") {
	case "synthetic":
		wl = &Synthetic{Endpoint: ep, Input: in, Output: out, PrefixRatio: w.PrefixRatio, IgnoreEOS: true, Seed: seed}
	case "multi-turn":
		turns, err := dist(w.Turns, "5")
		if err != nil {
			return nil, o, fmt.Errorf("workload turns: %w", err)
		}
		var think time.Duration
		if w.Think != "" {
			if think, err = time.ParseDuration(w.Think); err != nil || think < 0 {
				return nil, o, fmt.Errorf("workload think %q: want a duration", w.Think)
			}
		}
		wl = &MultiTurn{Turns: turns, FirstInput: in, Input: FixedDist(max(1, int(in.Mean()/4))), Output: out, Think: think, IgnoreEOS: true, Seed: seed}
	default:
		return nil, o, fmt.Errorf("workload kind %q: want synthetic or multi-turn", w.Kind)
	}
	if err := wl.Validate(); err != nil {
		return nil, o, err
	}
	o.Concurrency, o.Rate, o.Requests, o.Warmup = w.Concurrency, w.Rate, w.Requests, w.Warmup
	if w.Duration != "" {
		if o.Duration, err = time.ParseDuration(w.Duration); err != nil {
			return nil, o, fmt.Errorf("workload duration %q: %w", w.Duration, err)
		}
	}
	if o.Requests == 0 && o.Duration == 0 {
		o.Requests = 50
	}
	if o.Concurrency == 0 && o.Rate == 0 {
		o.Concurrency = 1
	}
	return wl, o, nil
}

func cmp(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// ExperimentStarter starts a `tandem serve` with the given flags; the CLI
// supplies it (this package does not import the server).
type ExperimentStarter func(ctx context.Context, serve map[string]string) (url string, stop func(), err error)

// RunExperiment runs every variant trials times, in interleaved order:
// trial t runs the variants rotated by t, so a drift of the machine over
// the experiment touches every variant alike. Each started variant gets a
// fresh server per trial (cold caches, no carry-over). A trial that cannot
// start is an error Result and the experiment goes on.
func RunExperiment(ctx context.Context, wl Workload, o Options, plans []VariantPlan, trials int, start ExperimentStarter) []*Result {
	var out []*Result
	k := len(plans)
	for t := 1; t <= trials; t++ {
		for j := range k {
			if ctx.Err() != nil {
				return out
			}
			p := plans[(j+t-1)%k]
			o := o
			o.ProgressPrefix = fmt.Sprintf("[run %d/%d: variant %s, trial %d/%d] ", (t-1)*k+j+1, trials*k, p.Name, t, trials)
			res, err := runVariant(ctx, wl, o, p, t, start)
			if err != nil {
				res = &Result{Scenario: wl.Name(), Run: t, Labels: []string{p.Name}, Error: err.Error()}
			}
			out = append(out, res)
		}
	}
	return out
}

func runVariant(ctx context.Context, wl Workload, o Options, p VariantPlan, trial int, start ExperimentStarter) (*Result, error) {
	url := p.URL
	if url == "" {
		if start == nil {
			return nil, errors.New("no server starter")
		}
		u, stop, err := start(ctx, p.Serve)
		if err != nil {
			return nil, fmt.Errorf("starting %s: %w", p.Name, err)
		}
		defer stop()
		url = u
	}
	model := ""
	if len(o.Targets) > 0 {
		model = o.Targets[0].Model
	}
	key := ""
	if len(o.Targets) > 0 {
		key = o.Targets[0].APIKey
	}
	o.Targets = []Target{{Label: p.Name, URL: url, Model: model, APIKey: key}}
	o.Run = trial
	return Run(ctx, wl, o)
}

// Figure names of an experiment, in display order.
var experimentFigures = []string{
	"goodput_tok_per_s", "slo_attainment", "cost_per_mtok", "out_tok_per_s", "req_per_s",
	"ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "e2e_p50_ms", "e2e_p99_ms",
	"errors", "cancelled", "generated_overlap", "observed_cached_share",
	"server_cache_hit_rate", "server_evicted_blocks", "server_preemptions", "server_transfer_bytes", "server_disagg_remote",
	"server_kv_usage_max",
}

// trialFigures is one label's figures in one run.
func trialFigures(res *Result, label string, slo SLO, cost float64) map[string]float64 {
	sums := summarize([]*Result{res}, nil)
	var s *Summary
	for i := range sums {
		if sums[i].Label == label {
			s = &sums[i]
		}
	}
	if s == nil {
		return nil
	}
	var recs []Record
	for i := range res.Records {
		if res.Records[i].Label == label {
			recs = append(recs, res.Records[i])
		}
	}
	g := goodputOf(recs, slo, res.Elapsed.Seconds(), cost)
	ov, ca := overlapShares(recs)
	f := map[string]float64{
		"goodput_tok_per_s": g.TokPerS, "slo_attainment": g.Attainment, "out_tok_per_s": s.OutTokPerS, "req_per_s": s.ReqPerS,
		"ttft_p50_ms": s.TTFT.P50, "ttft_p99_ms": s.TTFT.P99, "itl_p50_ms": s.ITL.P50, "itl_p99_ms": s.ITL.P99,
		"e2e_p50_ms": s.E2E.P50, "e2e_p99_ms": s.E2E.P99, "errors": float64(s.Errors), "cancelled": float64(s.Cancelled),
		"generated_overlap": ov,
	}
	if ca >= 0 {
		f["observed_cached_share"] = ca
	}
	if cost > 0 && g.CostPerMTok > 0 {
		f["cost_per_mtok"] = g.CostPerMTok
	}
	if m := s.Server; m != nil && m.Scrapes > m.Failed {
		if !slices.Contains(m.Missing, famCacheHits) {
			f["server_cache_hit_rate"] = m.CacheHitRate
		}
		if !slices.Contains(m.Missing, famEvictions) {
			f["server_evicted_blocks"] = m.Evictions
		}
		if !slices.Contains(m.Missing, famPreemptions) {
			f["server_preemptions"] = m.Preemptions
		}
		if !slices.Contains(m.Missing, famXferBytes) {
			f["server_transfer_bytes"] = m.TransferBytes
		}
		if !slices.Contains(m.Missing, famDisagg) {
			f["server_disagg_remote"] = m.DisaggDecisions["remote"]
		}
		if !slices.Contains(m.Missing, famKVUsage) {
			f["server_kv_usage_max"] = m.KVUsageMax
		}
	}
	return f
}

// VariantResult is one variant's figures over its trials.
type VariantResult struct {
	VariantPlan
	Trials  int           `json:"trials"`
	Failed  int           `json:"failed_trials"`
	Figures map[string]CI `json:"figures"`
}

// Verdict is the break-even test of one variant against the baseline (the
// first): it pays when its goodput ÷ the baseline's exceeds its cost ÷ the
// baseline's (D/A in the Dynamo report's notation), with the goodput ratio
// a paired 95% interval over trials.
type Verdict struct {
	Variant      string  `json:"variant"`
	Baseline     string  `json:"baseline"`
	GoodputRatio CI      `json:"goodput_ratio"`
	CostRatio    float64 `json:"cost_ratio"`
	// Outcome is "pays", "does not pay" or "inconclusive" (the interval
	// holds the break-even ratio, or there is a single trial).
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
}

// ExperimentResult is what an experiment (or a compare) found.
type ExperimentResult struct {
	Name     string          `json:"name"`
	Variable string          `json:"variable"`
	Trials   int             `json:"trials"`
	SLO      SLO             `json:"slo"`
	Variants []VariantResult `json:"variants"`
	Verdicts []Verdict       `json:"verdicts"`
}

// Analyze computes each variant's figures with 95% intervals over the
// trials and the break-even verdicts against the first variant.
func Analyze(name, variable string, plans []VariantPlan, runs []*Result, slo SLO) *ExperimentResult {
	x := &ExperimentResult{Name: name, Variable: variable, SLO: slo}
	perTrial := map[string]map[int]map[string]float64{}
	for _, p := range plans {
		perTrial[p.Name] = map[int]map[string]float64{}
	}
	vr := make([]VariantResult, len(plans))
	idx := map[string]int{}
	for i, p := range plans {
		vr[i] = VariantResult{VariantPlan: p, Figures: map[string]CI{}}
		idx[p.Name] = i
	}
	for _, res := range runs {
		x.Trials = max(x.Trials, res.Run)
		for _, l := range res.Labels {
			i, ok := idx[l]
			if !ok {
				continue
			}
			vr[i].Trials++
			if res.Error != "" {
				vr[i].Failed++
				continue
			}
			if f := trialFigures(res, l, slo, plans[i].CostPerHour); f != nil {
				perTrial[l][res.Run] = f
			}
		}
	}
	for i, p := range plans {
		trials := slices.Sorted(maps.Keys(perTrial[p.Name]))
		for _, fig := range experimentFigures {
			var vals []float64
			for _, t := range trials {
				if v, ok := perTrial[p.Name][t][fig]; ok {
					vals = append(vals, v)
				}
			}
			if len(vals) > 0 {
				vr[i].Figures[fig] = MeanCI(vals)
			}
		}
	}
	x.Variants = vr
	base := plans[0]
	for _, p := range plans[1:] {
		v := Verdict{Variant: p.Name, Baseline: base.Name, CostRatio: 1}
		switch {
		case base.CostPerHour > 0 && p.CostPerHour > 0:
			v.CostRatio = round3(p.CostPerHour / base.CostPerHour)
		case maps.Equal(p.Resources, base.Resources):
			v.CostRatio = 1 // equal resources cost the same
		case base.Resources["workers"] > 0 && p.Resources["workers"] > 0:
			v.CostRatio = round3(p.Resources["workers"] / base.Resources["workers"])
		}
		// Paired ratios: trial t of both ran back to back on the same
		// machine, so their ratio cancels the machine's drift.
		var ratios []float64
		for _, t := range slices.Sorted(maps.Keys(perTrial[p.Name])) {
			b, ok := perTrial[base.Name][t]
			if !ok || b["goodput_tok_per_s"] <= 0 {
				continue
			}
			ratios = append(ratios, perTrial[p.Name][t]["goodput_tok_per_s"]/b["goodput_tok_per_s"])
		}
		v.GoodputRatio = MeanCI(ratios)
		v.Outcome, v.Reason = breakEven(v.GoodputRatio, v.CostRatio)
		x.Verdicts = append(x.Verdicts, v)
	}
	return x
}

// breakEven applies the rule goodput ratio > cost ratio to an interval.
func breakEven(r CI, cost float64) (string, string) {
	switch {
	case r.N == 0:
		return "inconclusive", "no trial of both variants had goodput to compare"
	case !r.Defined():
		if r.Mean > cost {
			return "inconclusive", fmt.Sprintf("goodput ratio %.3f > cost ratio %.3f in the one trial; run more trials for an interval", r.Mean, cost)
		}
		return "inconclusive", fmt.Sprintf("goodput ratio %.3f ≤ cost ratio %.3f in the one trial; run more trials for an interval", r.Mean, cost)
	case r.Lo() > cost:
		return "pays", fmt.Sprintf("goodput ratio %.3f [%.3f, %.3f] is above the cost ratio %.3f", r.Mean, r.Lo(), r.Hi(), cost)
	case r.Hi() < cost:
		return "does not pay", fmt.Sprintf("goodput ratio %.3f [%.3f, %.3f] is below the cost ratio %.3f", r.Mean, r.Lo(), r.Hi(), cost)
	}
	return "inconclusive", fmt.Sprintf("goodput ratio %.3f [%.3f, %.3f] holds the cost ratio %.3f", r.Mean, r.Lo(), r.Hi(), cost)
}

func (x *ExperimentResult) writeText(w io.Writer) {
	fmt.Fprintf(w, "\nexperiment %s: variable %s, %d trial(s), mean ± 95%% CI (Student's t)", x.Name, x.Variable, x.Trials)
	if !x.SLO.IsZero() {
		fmt.Fprintf(w, ", SLO %s", x.SLO)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "figure\t")
	for _, v := range x.Variants {
		fmt.Fprintf(tw, "%s\t", v.Name)
	}
	fmt.Fprintln(tw)
	fmt.Fprint(tw, "resources\t")
	for _, v := range x.Variants {
		fmt.Fprintf(tw, "%s\t", resText(v.Resources))
	}
	fmt.Fprintln(tw)
	fmt.Fprint(tw, "cost per hour\t")
	for _, v := range x.Variants {
		fmt.Fprintf(tw, "%s\t", strconv.FormatFloat(v.CostPerHour, 'f', -1, 64))
	}
	fmt.Fprintln(tw)
	for _, fig := range x.sortedFigures() {
		fmt.Fprintf(tw, "%s\t", fig)
		for _, v := range x.Variants {
			c, ok := v.Figures[fig]
			if !ok {
				fmt.Fprint(tw, "-\t")
				continue
			}
			fmt.Fprintf(tw, "%s\t", c)
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
	for _, v := range x.Variants {
		if v.Failed > 0 {
			fmt.Fprintf(w, "%s: %d of %d trials failed to run\n", v.Name, v.Failed, v.Trials)
		}
	}
	fmt.Fprintln(w, "\nbreak-even (goodput ratio against cost ratio D/A)")
	for _, v := range x.Verdicts {
		fmt.Fprintf(w, "  %s vs %s: %s: %s\n", v.Variant, v.Baseline, strings.ToUpper(v.Outcome), v.Reason)
	}
}

// CompareReports compares the first label of two saved reports with the
// experiment's statistics: each run of a report is one trial. Paired
// ratios need equal trial counts; otherwise each trial of b is divided by
// a's mean.
func CompareReports(a, b *Report, slo SLO, costA, costB float64) (*ExperimentResult, error) {
	if len(a.Summaries) == 0 || len(b.Summaries) == 0 {
		return nil, errors.New("compare: a report without results")
	}
	la, lb := a.Summaries[0].Label, b.Summaries[0].Label
	na, nb := "A: "+la, "B: "+lb
	relabel := func(rep *Report, from, to string) []*Result {
		var out []*Result
		t := 0
		for _, res := range rep.Runs {
			if !slices.Contains(res.Labels, from) {
				continue
			}
			t++
			c := *res
			c.Run, c.Labels, c.Records = t, []string{to}, nil
			for i, l := range res.Labels {
				if l == from {
					if i < len(res.Server) {
						c.Server = []*ServerMetrics{res.Server[i]}
					}
					if i < len(res.Cancelled) {
						c.Cancelled = []int{res.Cancelled[i]}
					}
				}
			}
			for _, r := range res.Records {
				if r.Label == from {
					r.Label = to
					c.Records = append(c.Records, r)
				}
			}
			out = append(out, &c)
		}
		return out
	}
	ra, rb := relabel(a, la, na), relabel(b, lb, nb)
	plans := []VariantPlan{{Name: na, CostPerHour: costA}, {Name: nb, CostPerHour: costB}}
	x := Analyze("compare", "saved run", plans, append(ra, rb...), slo)
	if len(ra) != len(rb) && len(x.Verdicts) == 1 {
		// Unpaired: each of b's trials against a's mean.
		ga := x.Variants[0].Figures["goodput_tok_per_s"].Mean
		var ratios []float64
		for _, v := range x.Variants[1].Figures["goodput_tok_per_s"].Values {
			if ga > 0 {
				ratios = append(ratios, v/ga)
			}
		}
		x.Verdicts[0].GoodputRatio = MeanCI(ratios)
		x.Verdicts[0].Outcome, x.Verdicts[0].Reason = breakEven(x.Verdicts[0].GoodputRatio, x.Verdicts[0].CostRatio)
		x.Verdicts[0].Reason += " (unpaired: the reports have different trial counts)"
	}
	return x, nil
}

// sortedFigures lists the figures a result has, in display order.
func (x *ExperimentResult) sortedFigures() []string {
	var out []string
	for _, f := range experimentFigures {
		if slices.ContainsFunc(x.Variants, func(v VariantResult) bool { _, ok := v.Figures[f]; return ok }) {
			out = append(out, f)
		}
	}
	return out
}
