package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"time"
)

// Phase is one stretch of a synthetic day: the request rate moves
// linearly from From to To (requests per second) over Duration.
type Phase struct {
	Duration time.Duration
	From, To float64
}

// DayPhases is the synthetic day of the planner's experiments, compressed
// to total: low, a ramp to 5× the low rate, a plateau, a fall, low again.
func DayPhases(low float64, total time.Duration) []Phase {
	f := func(x float64) time.Duration { return time.Duration(x * float64(total)) }
	return []Phase{
		{f(0.30), low, low},
		{f(0.20), low, 5 * low},
		{f(0.25), 5 * low, 5 * low},
		{f(0.15), 5 * low, low},
		{f(0.10), low, low},
	}
}

// Synthetic describes a generated trace.
type Synthetic struct {
	Phases []Phase
	// ISL and OSL are drawn uniformly in [Min, Max].
	ISLMin, ISLMax, OSLMin, OSLMax int
	// SharedPrefixes system prompts of SharedBlocks blocks each; every
	// request starts with one of them. HashBlock tokens per block.
	SharedPrefixes, SharedBlocks, HashBlock int
	Seed                                    uint64
}

// Generate draws a Poisson arrival process of the phases' rate (thinning
// a homogeneous process at the peak rate), deterministic for a seed.
func (g Synthetic) Generate() ([]Request, error) {
	if g.ISLMin < 1 || g.ISLMax < g.ISLMin || g.OSLMin < 1 || g.OSLMax < g.OSLMin || g.ISLMax > 1<<20 || g.OSLMax > 1<<20 {
		return nil, fmt.Errorf("sim: lengths isl [%d,%d], osl [%d,%d] out of range", g.ISLMin, g.ISLMax, g.OSLMin, g.OSLMax)
	}
	peak, total := 0.0, 0.0
	for _, p := range g.Phases {
		if p.Duration < 0 || p.From < 0 || p.To < 0 || math.IsNaN(p.From+p.To) || p.From > 1e6 || p.To > 1e6 {
			return nil, fmt.Errorf("sim: phase %+v out of range", p)
		}
		peak = max(peak, p.From, p.To)
		total += p.Duration.Seconds()
	}
	if peak == 0 || total == 0 {
		return nil, fmt.Errorf("sim: the phases carry no load")
	}
	rate := func(t float64) float64 {
		for _, p := range g.Phases {
			d := p.Duration.Seconds()
			if t < d {
				return p.From + (p.To-p.From)*t/d
			}
			t -= d
		}
		return 0
	}
	rng := rand.New(rand.NewPCG(g.Seed, 0x9e3779b97f4a7c15))
	var out []Request
	nextID := int64(1 << 40)
	for t := 0.0; ; {
		t += rng.ExpFloat64() / peak
		if t >= total {
			break
		}
		if rng.Float64()*peak > rate(t) {
			continue
		}
		r := Request{At: t, ISL: g.ISLMin + rng.IntN(g.ISLMax-g.ISLMin+1), OSL: g.OSLMin + rng.IntN(g.OSLMax-g.OSLMin+1)}
		if g.HashBlock > 0 {
			nb := (r.ISL + g.HashBlock - 1) / g.HashBlock
			sp := -1
			if g.SharedPrefixes > 0 {
				sp = rng.IntN(g.SharedPrefixes)
			}
			for b := range nb {
				if sp >= 0 && b < g.SharedBlocks {
					r.Blocks = append(r.Blocks, int64(sp*g.SharedBlocks+b))
					continue
				}
				r.Blocks = append(r.Blocks, nextID)
				nextID++
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// mooncakeLine is one line of a Mooncake FAST'25 trace
// (github.com/kvcache-ai/Mooncake, FAST25-release/traces): arrival in ms,
// lengths in tokens, one hash id per 512-token block.
type mooncakeLine struct {
	Timestamp    float64 `json:"timestamp"`
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
}

// MooncakeBlock is the tokens per hash id in Mooncake traces.
const MooncakeBlock = 512

// LoadMooncake reads a Mooncake JSONL trace, dividing its timestamps by
// speedup (2 replays an hour in 30 minutes), keeping requests whose
// prompt and output fit maxTokens (0: all).
func LoadMooncake(r io.Reader, speedup float64, maxTokens int) ([]Request, error) {
	if !(speedup > 0) || math.IsInf(speedup, 0) || speedup > 1e9 {
		return nil, fmt.Errorf("sim: speedup %v must be positive", speedup)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var out []Request
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var e mooncakeLine
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("sim: trace line %d: %w", line, err)
		}
		switch {
		case e.InputLength < 1 || e.InputLength > 1<<24:
			return nil, fmt.Errorf("sim: trace line %d: input_length %d out of range [1, %d]", line, e.InputLength, 1<<24)
		case e.OutputLength < 0 || e.OutputLength > 1<<24:
			return nil, fmt.Errorf("sim: trace line %d: output_length %d out of range [0, %d]", line, e.OutputLength, 1<<24)
		case !(e.Timestamp >= 0) || e.Timestamp > 1e12:
			return nil, fmt.Errorf("sim: trace line %d: timestamp %v out of range [0, 1e12] ms", line, e.Timestamp)
		case len(e.HashIDs) > 1<<16:
			return nil, fmt.Errorf("sim: trace line %d: %d hash_ids, at most %d", line, len(e.HashIDs), 1<<16)
		}
		at := e.Timestamp / 1000 / speedup
		if math.IsInf(at, 0) || at > 1e12 {
			return nil, fmt.Errorf("sim: trace line %d: timestamp %v ms is out of range after the speedup %v", line, e.Timestamp, speedup)
		}
		if maxTokens > 0 && e.InputLength+e.OutputLength > maxTokens {
			continue
		}
		out = append(out, Request{At: at, ISL: e.InputLength, OSL: e.OutputLength, Blocks: e.HashIDs})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("sim: reading trace: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("sim: trace is empty")
	}
	return out, nil
}

// LoadMooncakeFile is LoadMooncake on a file.
func LoadMooncakeFile(path string, speedup float64, maxTokens int) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	defer f.Close()
	return LoadMooncake(f, speedup, maxTokens)
}
