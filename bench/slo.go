package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// SLO is a latency target every request must meet to count towards
// goodput. A zero bound is no bound. ITL is judged on the request's mean
// inter-token gap, as vLLM's `bench serve --goodput tpot:` and AIPerf's
// inter_token_latency goodput constraint judge it
// (https://docs.vllm.ai/en/v0.15.0/api/vllm/benchmarks/serve/,
// https://docs.nvidia.com/aiperf/tutorials/metrics-analysis/benchmark-goodput-with-ai-perf):
// one slow gap in a long stream does not fail a request, a slow stream does.
type SLO struct {
	TTFTMs float64 `json:"ttft_ms,omitempty"`
	ITLMs  float64 `json:"itl_ms,omitempty"`
	E2EMs  float64 `json:"e2e_ms,omitempty"`
}

// IsZero reports whether the SLO bounds nothing.
func (s SLO) IsZero() bool { return s.TTFTMs == 0 && s.ITLMs == 0 && s.E2EMs == 0 }

// String is the form ParseSLO reads.
func (s SLO) String() string {
	var parts []string
	for _, p := range []struct {
		k string
		v float64
	}{{"ttft", s.TTFTMs}, {"itl", s.ITLMs}, {"e2e", s.E2EMs}} {
		if p.v > 0 {
			parts = append(parts, p.k+"="+strconv.FormatFloat(p.v, 'g', -1, 64)+"ms")
		}
	}
	return strings.Join(parts, ",")
}

// maxSLOMs bounds an SLO at a day: anything longer is a typo, and the
// bound keeps the arithmetic far from overflow.
const maxSLOMs = 24 * 3600 * 1000

// ParseSLO reads "ttft=500ms,itl=50ms,e2e=10s". Each value is a Go
// duration or a plain number of milliseconds; keys may be left out, none
// may repeat.
func ParseSLO(spec string) (SLO, error) {
	var s SLO
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return s, nil
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		k = strings.ToLower(strings.TrimSpace(k))
		if !ok {
			return SLO{}, fmt.Errorf("--slo %q: %q is not key=value (keys ttft, itl, e2e)", spec, part)
		}
		if seen[k] {
			return SLO{}, fmt.Errorf("--slo %q: %s given twice", spec, k)
		}
		seen[k] = true
		msv, err := parseMs(strings.TrimSpace(v))
		if err != nil {
			return SLO{}, fmt.Errorf("--slo %q: %s: %w", spec, k, err)
		}
		switch k {
		case "ttft":
			s.TTFTMs = msv
		case "itl", "tpot":
			s.ITLMs = msv
		case "e2e", "e2el":
			s.E2EMs = msv
		default:
			return SLO{}, fmt.Errorf("--slo %q: unknown key %q (want ttft, itl or e2e)", spec, k)
		}
	}
	return s, nil
}

func parseMs(v string) (float64, error) {
	var msv float64
	if d, err := time.ParseDuration(v); err == nil {
		msv = float64(d) / float64(time.Millisecond)
	} else if f, err2 := strconv.ParseFloat(v, 64); err2 == nil {
		msv = f
	} else {
		return 0, fmt.Errorf("%q is neither a duration (500ms) nor a number of milliseconds", v)
	}
	if math.IsNaN(msv) || msv <= 0 || msv > maxSLOMs {
		return 0, fmt.Errorf("%q must be above 0 and at most 24h", v)
	}
	return msv, nil
}

// Met reports whether a successful request met every bound. A request
// without a streamed first token (non-streaming) saw its first token with
// the whole body, so its TTFT is its E2E.
func (s SLO) Met(r *Record) bool {
	if !r.OK() {
		return false
	}
	ttft := r.TTFTMs
	if ttft < 0 {
		ttft = r.E2EMs
	}
	if s.TTFTMs > 0 && ttft > s.TTFTMs {
		return false
	}
	if s.E2EMs > 0 && r.E2EMs > s.E2EMs {
		return false
	}
	if s.ITLMs > 0 && len(r.ITLMs) > 0 {
		sum := 0.0
		for _, g := range r.ITLMs {
			sum += g
		}
		if sum/float64(len(r.ITLMs)) > s.ITLMs {
			return false
		}
	}
	return true
}

// Goodput is what a label delivered within the SLO.
type Goodput struct {
	SLO SLO `json:"slo"`
	// Met counts successful requests that met every bound (all successful
	// requests when the SLO is empty).
	Met int `json:"met"`
	// Attainment is Met over requests sent (errors count as misses).
	Attainment float64 `json:"attainment"`
	// TokPerS is the output tokens per second of the requests that met
	// the SLO; ReqPerS those requests per second.
	TokPerS float64 `json:"tok_per_s"`
	ReqPerS float64 `json:"req_per_s"`
	// CostPerHour is the deployment's cost (--cost-per-hour); with it,
	// CostPerMTok is the cost of a million output tokens delivered within
	// the SLO: cost_per_hour / (goodput tok/s × 3600) × 1e6, the formula of
	// a hands-on report on NVIDIA Dynamo's disaggregated serving. 0 when
	// no cost was given; -1 when nothing met the SLO (infinite cost).
	CostPerHour float64 `json:"cost_per_hour,omitempty"`
	CostPerMTok float64 `json:"cost_per_mtok,omitempty"`
}

// costPerMTok is the cost of a million tokens at tokPerS for costPerHour.
func costPerMTok(costPerHour, tokPerS float64) float64 {
	switch {
	case costPerHour <= 0:
		return 0
	case tokPerS <= 0:
		return -1
	}
	return costPerHour / (tokPerS * 3600) * 1e6
}

// goodputOf computes the goodput of recs over elapsedS seconds.
func goodputOf(recs []Record, slo SLO, elapsedS, costPerHour float64) Goodput {
	g := Goodput{SLO: slo, CostPerHour: costPerHour}
	var tokens int64
	for i := range recs {
		if slo.Met(&recs[i]) {
			g.Met++
			tokens += int64(recs[i].OutputTokens)
		}
	}
	if len(recs) > 0 {
		g.Attainment = round3(float64(g.Met) / float64(len(recs)))
	}
	if elapsedS > 0 {
		g.TokPerS = round3(float64(tokens) / elapsedS)
		g.ReqPerS = round3(float64(g.Met) / elapsedS)
	}
	g.CostPerMTok = round3(costPerMTok(costPerHour, g.TokPerS))
	return g
}

// ApplySLO computes every summary's goodput under slo, with the hourly
// cost of each label (a label missing from costs, or a nil map, has no
// cost). NewReport applies the empty SLO: goodput is then the successful
// throughput.
func (r *Report) ApplySLO(slo SLO, costs map[string]float64) {
	r.SLO, r.costs = slo, costs
	byLabel := map[string][]Record{}
	elapsed := map[string]float64{}
	for _, res := range r.Runs {
		for _, l := range res.Labels {
			elapsed[l] += res.Elapsed.Seconds()
		}
		for i := range res.Records {
			byLabel[res.Records[i].Label] = append(byLabel[res.Records[i].Label], res.Records[i])
		}
	}
	for i := range r.Summaries {
		s := &r.Summaries[i]
		g := goodputOf(byLabel[s.Label], slo, elapsed[s.Label], costs[s.Label])
		s.Goodput = &g
	}
	r.Sweep = r.sweepPoints()
}
