package planner

import (
	"fmt"
	"math"
)

// Role is what a pool's workers do.
type Role string

// Roles of a pool.
const (
	RolePrefill    Role = "prefill"
	RoleDecode     Role = "decode"
	RoleAggregated Role = "aggregated"
)

// ParseRole accepts prefill, decode, aggregated (or agg, both).
func ParseRole(s string) (Role, error) {
	switch s {
	case "prefill":
		return RolePrefill, nil
	case "decode":
		return RoleDecode, nil
	case "aggregated", "agg", "both":
		return RoleAggregated, nil
	}
	return "", fmt.Errorf("planner: unknown pool role %q (prefill, decode, aggregated)", s)
}

// Load is one interval's traffic: requests per second, mean input and
// output lengths in tokens, the share of input tokens that hit a prefix
// cache, and ISLTail, the input length at the targets' quantile over the
// mean (1 when unknown): heavy-tailed prompts (Mooncake's p90 is well
// above its mean) set the quantile TTFT, not the mean prompt.
type Load struct {
	Rate, ISL, OSL, HitFrac float64
	ISLTail                 float64
	// Window is the seconds Rate is counted over (the planner interval).
	Window float64
}

func (l Load) tail() float64 {
	if !(l.ISLTail >= 1) || l.ISLTail > 1e3 {
		return 1
	}
	return l.ISLTail
}

func (l Load) valid() bool {
	return usable(l.Rate) && usable(l.ISL) && usable(l.OSL) && usable(l.HitFrac) && l.Rate >= 0 && l.ISL >= 0 && l.OSL >= 0
}

// Targets are the service levels: TTFT and ITL in milliseconds, at the
// given quantile of requests (0.9 for p90, 0.99 for p99). ITL is a
// request's mean inter-token gap, as goodput tools judge it.
type Targets struct {
	TTFTMs, ITLMs float64
	Quantile      float64
}

// Model is a profile plus its online correction factors: the ratio of
// observed to predicted TTFT and ITL, each smoothed and clamped.
type Model struct {
	Profile *Profile
	// PCorr and DCorr multiply predicted TTFT and ITL; 1 is the profile.
	PCorr, DCorr float64
}

// NewModel returns a model with neutral corrections.
func NewModel(p *Profile) *Model { return &Model{Profile: p, PCorr: 1, DCorr: 1} }

// Sizing is a policy's answer for one pool.
type Sizing struct {
	Replicas             int
	PredTTFTMs, PredITLM float64
	// Why names the binding constraint: "ttft", "itl", "kv", "idle".
	Why string
}

// Policy sizes one pool for a load.
type Policy interface {
	Name() string
	// Size returns the replicas pool needs for load under t, at most
	// limit (a search bound, not the pool's --max: the answer may exceed
	// the max, which the planner reports as planner_at_max).
	Size(pool Pool, load Load, t Targets, m *Model, limit int) Sizing
	// Correct updates m's correction factors from one interval's
	// observation of pool, served by current replicas.
	Correct(pool Pool, obs Observation, current int, t Targets, m *Model)
	// Horizon is how many intervals ahead the policy plans for, given the
	// time a new worker takes to become ready, in intervals.
	Horizon(startupIntervals float64) int
}

// NewPolicy builds a policy by name: "tandem" or "dynamo".
func NewPolicy(name string) (Policy, error) {
	switch name {
	case "tandem":
		return Tandem{}, nil
	case "dynamo":
		return Dynamo{}, nil
	}
	return nil, fmt.Errorf("planner: unknown policy %q (tandem, dynamo)", name)
}

// contextTokens is a decode's mean context over its life: the prompt plus
// half its output, the context Dynamo's planner interpolates ITL at.
func contextTokens(l Load) float64 { return l.ISL + l.OSL/2 }

// zScore is the standard normal quantile.
func zScore(q float64) float64 {
	q = min(max(q, 0.5), 0.9999)
	return math.Sqrt2 * math.Erfinv(2*q-1)
}

// smooth folds a new correction ratio into old: half-weight EWMA, the
// ratio clamped to [0.5, 3] so one odd interval cannot swing the fleet.
func smooth(old, ratio float64) float64 {
	if !usable(ratio) || ratio <= 0 {
		return old
	}
	return 0.5*old + 0.5*min(max(ratio, 0.5), 3)
}

// minSamples is the fewest requests an interval must have finished for
// its latency quantiles to correct the model.
const minSamples = 20

// Dynamo is the classic throughput-formula policy of NVIDIA Dynamo's SLA
// planner (ai-dynamo/dynamo, components/src/dynamo/planner/utils/
// planner_core.py; docs/architecture/sla_planner.md):
//
//	prefill = ceil(rate·isl·min(1, p_corr) / prefill_thpt_per_gpu(isl))
//	decode  = ceil(rate·osl / decode_thpt_per_gpu(itl_sla / d_corr, isl + osl/2))
//
// with p_corr = observed TTFT / profile TTFT at the observed ISL and
// d_corr = observed ITL / profile ITL at the observed per-worker
// concurrency, each the raw ratio of the last interval. It sizes for mean
// throughput: no queueing headroom, no prefix-cache discount, and the next
// interval's load only. Dynamo has no formula for an aggregated pool; the
// baseline takes the larger of the two.
type Dynamo struct{}

// Name implements Policy.
func (Dynamo) Name() string { return "dynamo" }

// Horizon implements Policy: Dynamo plans the next interval.
func (Dynamo) Horizon(float64) int { return 1 }

// Size implements Policy.
func (Dynamo) Size(pool Pool, l Load, t Targets, m *Model, limit int) Sizing {
	p := m.Profile
	var np, nd int
	s := Sizing{}
	if l.Rate <= 0 || l.ISL <= 0 {
		return Sizing{Replicas: 0, Why: "idle"}
	}
	if pool.Role != RoleDecode {
		thpt := l.ISL / (p.PrefillMs(l.ISL, 0) / 1000) // tokens/s of one worker at this ISL
		np = ceilLimit(l.Rate*l.ISL*min(1, m.PCorr)/thpt, limit)
		s.Why = "ttft"
	}
	if pool.Role != RolePrefill {
		ctx := contextTokens(l)
		itl := t.ITLMs / max(m.DCorr, 1e-3)
		c := p.MaxConcurrency(itl, ctx)
		if c <= 0 {
			nd = limit
		} else {
			thpt := c / (p.ITLMs(c, ctx) / 1000)
			nd = ceilLimit(l.Rate*max(l.OSL, 1)/thpt, limit)
		}
		if nd > np {
			s.Why = "itl"
		}
	}
	s.Replicas = max(np, nd)
	return s
}

// Correct implements Policy with Dynamo's raw ratios.
func (Dynamo) Correct(pool Pool, o Observation, n int, t Targets, m *Model) {
	if o.Samples < minSamples || n < 1 || !o.Load.valid() {
		return
	}
	p := m.Profile
	if pool.Role != RoleDecode && o.TTFTMs > 0 {
		if e := p.PrefillMs(o.Load.ISL, 0); e > 0 {
			m.PCorr = o.TTFTMs / e
		}
	}
	if pool.Role != RolePrefill && o.ITLMs > 0 {
		// Dynamo's concurrency: requests in flight per decode worker over
		// the interval, by Little's law from the request duration.
		conc := max(o.Load.Rate*o.Load.OSL*o.ITLMs/1000/float64(n), 1)
		if e := p.ITLMs(conc, contextTokens(o.Load)); usable(e) && e > 0 {
			m.DCorr = o.ITLMs / e
		}
	}
}

func ceilLimit(v float64, limit int) int {
	if !usable(v) || v >= float64(limit) {
		return limit
	}
	return max(int(math.Ceil(v-1e-9)), 0)
}

// Tandem sizes for the latency quantile rather than the mean:
//
//   - prefill: each worker is a queue of prompts whose service time is the
//     profile's prefill time of the uncached part (the observed prefix-hit
//     fraction); the quantile TTFT is service plus the M/M/1-like waiting
//     tail at per-worker utilization ρ = rate·service/n, times the TTFT
//     correction; the fewest n that meets the target wins;
//   - decode: per-worker concurrency is Poisson-like around its mean
//     m = rate·osl·itl/n (Little's law), so the quantile concurrency
//     m + z·√m must stay under the profile's largest concurrency whose
//     corrected ITL meets the target (and within the KV cache);
//   - aggregated: both, with a decode step added to each prefill and each
//     decode step lengthened by the prefill share of the worker's time;
//   - it plans for the larger of the next interval's load and the load
//     when a worker started now would be ready, so a ramp finds workers.
type Tandem struct{}

// Name implements Policy.
func (Tandem) Name() string { return "tandem" }

// Horizon implements Policy.
func (Tandem) Horizon(startupIntervals float64) int {
	return 1 + int(math.Ceil(max(startupIntervals, 0)))
}

// prefillTTFT is the predicted quantile TTFT (ms) of a pool of n workers,
// each adding extraMs (a decode step) to every prefill, before correction.
func prefillTTFT(l Load, n int, q, extraMs float64, p *Profile) float64 {
	if n < 1 {
		return math.Inf(1)
	}
	s := (p.PrefillMs(l.ISL, l.HitFrac) + extraMs) / 1000
	rho := l.Rate * s / float64(n)
	if rho >= 1 {
		return math.Inf(1)
	}
	wait := 0.0
	if rho > 1-q {
		// M/M/1: P(W > t) = ρ·exp(−(1−ρ)t/s).
		wait = s / (1 - rho) * math.Log(rho/(1-q))
	}
	// The quantile request is a long prompt: its own prefill at the
	// quantile length, behind the quantile wait.
	sq := (p.PrefillMs(l.ISL*l.tail(), l.HitFrac) + extraMs) / 1000
	return (sq + wait) * 1000
}

// decodeITL is the predicted quantile of a request's mean ITL (ms) on a
// pool of n workers, before correction, and the per-worker quantile
// concurrency. On an aggregated pool prefillShare of a worker's time goes
// to prefills of prefillMs each, which land in the steps of the decodes
// beside them: a request's mean ITL is the decode step stretched by that
// share, plus the spread of how many prefills (Poisson) hit its lifetime.
func decodeITL(l Load, n int, q, prefillShare, prefillMs float64, p *Profile) (float64, float64) {
	if n < 1 || prefillShare >= 1 {
		return math.Inf(1), 0
	}
	ctx := contextTokens(l)
	itl := p.ITLMs(1, ctx)
	var c float64
	// Fixed point of m = rate·osl·itl(m)/n: a few rounds converge, the
	// ITL curve being flat at small m and the answer capped by the KV.
	for range 8 {
		m := l.Rate * max(l.OSL, 1) * itl / 1000 / float64(n)
		c = m + zScore(q)*math.Sqrt(m)
		next := p.ITLMs(max(c, 1), ctx) / (1 - prefillShare)
		if !usable(next) {
			return math.Inf(1), c
		}
		if prefillShare > 0 {
			life := max(l.OSL, 1) * next / 1000 // seconds
			hits := l.Rate / float64(n) * life
			next += zScore(q) * math.Sqrt(hits) * prefillMs / max(l.OSL, 1)
		}
		itl = next
	}
	return itl, c
}

// Size implements Policy.
func (Tandem) Size(pool Pool, l Load, t Targets, m *Model, limit int) Sizing {
	if l.Rate <= 0 || l.ISL <= 0 {
		return Sizing{Replicas: 0, Why: "idle"}
	}
	p := m.Profile
	if l.Window > 0 {
		// An interval of Poisson arrivals at rate λ brings λ·T ± √(λ·T)
		// requests: size for the quantile count, not the mean.
		l.Rate += zScore(t.Quantile) * math.Sqrt(l.Rate/l.Window)
	}
	meets := func(n int) (bool, Sizing) {
		s := Sizing{Replicas: n}
		ok := true
		share, extra, pms := aggShares(pool, l, n, p)
		if pool.Role != RoleDecode {
			s.PredTTFTMs = prefillTTFT(l, n, t.Quantile, extra, p) * m.PCorr
			if !(s.PredTTFTMs <= t.TTFTMs) {
				ok, s.Why = false, "ttft"
			}
		}
		if pool.Role != RolePrefill {
			s.PredITLM, _ = decodeITL(l, n, t.Quantile, share, pms, p)
			s.PredITLM *= m.DCorr
			if !(s.PredITLM <= t.ITLMs) && s.Why == "" {
				ok, s.Why = false, "itl"
			}
		}
		return ok, s
	}
	// The answer is monotone in n: bisect between a lower bound from mean
	// throughput and the limit.
	lo, hi := 1, max(limit, 1)
	if ok, _ := meets(hi); !ok {
		_, s := meets(hi)
		return s
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if ok, _ := meets(mid); ok {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	_, s := meets(lo)
	// Report what the next smaller pool would have broken.
	if lo > 1 {
		_, smaller := meets(lo - 1)
		s.Why = smaller.Why
	} else {
		s.Why = "min"
	}
	return s
}

// Correct implements Policy: the ratio of the observed quantile to the
// model's prediction for the observed load on the current replicas,
// smoothed.
func (Tandem) Correct(pool Pool, o Observation, n int, t Targets, m *Model) {
	if o.Samples < minSamples || n < 1 || !o.Load.valid() || o.Load.Rate <= 0 {
		return
	}
	p := m.Profile
	share, extra, pms := aggShares(pool, o.Load, n, p)
	if pool.Role != RoleDecode && o.TTFTMs > 0 {
		if e := prefillTTFT(o.Load, n, t.Quantile, extra, p); usable(e) && e > 0 {
			m.PCorr = smooth(m.PCorr, o.TTFTMs/e)
		}
	}
	if pool.Role != RolePrefill && o.ITLMs > 0 {
		if e, _ := decodeITL(o.Load, n, t.Quantile, share, pms, p); usable(e) && e > 0 {
			m.DCorr = smooth(m.DCorr, o.ITLMs/e)
		}
	}
}

// aggShares is, for an aggregated pool of n, the share of a worker's time
// spent prefilling, the decode step each prefill waits behind, and one
// prefill's time; zeros for other roles.
func aggShares(pool Pool, l Load, n int, p *Profile) (share, extraMs, prefillMs float64) {
	if pool.Role != RoleAggregated || n < 1 {
		return 0, 0, 0
	}
	prefillMs = p.PrefillMs(l.ISL, l.HitFrac)
	return l.Rate / float64(n) * prefillMs / 1000, p.ITLMs(1, contextTokens(l)), prefillMs
}
