package planner

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
)

func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func newLearner(t *testing.T, cfg LearnConfig) *ProfileLearner {
	t.Helper()
	if cfg.Base == nil {
		cfg.Base = seedProfile()
	}
	l, err := NewProfileLearner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLearnerConfigErrors(t *testing.T) {
	bad := seedProfile()
	bad.Version = 9
	for _, tc := range []struct {
		name string
		cfg  LearnConfig
		want string
	}{
		{"no base", LearnConfig{}, "needs a base"},
		{"invalid base", LearnConfig{Base: bad}, "version"},
		{"time scale", LearnConfig{Base: seedProfile(), TimeScale: math.NaN()}, "time scale"},
		{"negative time scale", LearnConfig{Base: seedProfile(), TimeScale: -1}, "time scale"},
		{"min samples", LearnConfig{Base: seedProfile(), MinSamples: 1000}, "min samples"},
		{"tolerance", LearnConfig{Base: seedProfile(), Tolerance: 2}, "tolerance"},
		{"cf tolerance", LearnConfig{Base: seedProfile(), CachedFractionTolerance: math.Inf(1)}, "cached-fraction"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewProfileLearner(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestLearnerCells files each kind of step and checks the counters and
// which cells end up learned.
func TestLearnerCells(t *testing.T) {
	l := newLearner(t, LearnConfig{TimeScale: 2})
	steps := []struct {
		st   engine.StepStats
		reps int
	}{
		// Lone prefill of 1024 tokens, 512 cached: cell (1024, 0.5).
		{engine.StepStats{PrefillTokens: 512, PrefillCachedTokens: 512, PrefillSeqs: 1, Duration: msDur(20)}, 3},
		// 1000 tokens is within 10% of 1024, cached 0: cell (1024, 0).
		{engine.StepStats{PrefillTokens: 1000, PrefillSeqs: 1, Duration: msDur(25)}, 3},
		// Only two: not enough to replace the base.
		{engine.StepStats{PrefillTokens: 128, PrefillSeqs: 1, Duration: msDur(5)}, 2},
		// 8 decodes at 4096: cell (8, 4096).
		{engine.StepStats{DecodeSeqs: 8, DecodeContextTokens: 8 * 4000, Duration: msDur(5)}, 4},
		// Mixed: a prefill beside decodes, two prefills.
		{engine.StepStats{PrefillTokens: 100, PrefillSeqs: 1, DecodeSeqs: 3, DecodeContextTokens: 3000, Duration: msDur(9)}, 1},
		{engine.StepStats{PrefillTokens: 100, PrefillSeqs: 2, Duration: msDur(9)}, 1},
		// Off the grid: 600 tokens, 3 decodes, cached fraction 0.3.
		{engine.StepStats{PrefillTokens: 600, PrefillSeqs: 1, Duration: msDur(9)}, 1},
		{engine.StepStats{DecodeSeqs: 3, DecodeContextTokens: 3 * 512, Duration: msDur(9)}, 1},
		{engine.StepStats{PrefillTokens: 700, PrefillCachedTokens: 300, PrefillSeqs: 1, Duration: msDur(9)}, 1},
		// Out of range: rejected before any arithmetic.
		{engine.StepStats{PrefillTokens: -1, PrefillSeqs: 1, Duration: msDur(9)}, 1},
		{engine.StepStats{DecodeSeqs: 1 << 30, DecodeContextTokens: 1, Duration: msDur(9)}, 1},
		{engine.StepStats{DecodeSeqs: 1, DecodeContextTokens: 512}, 1},
		{engine.StepStats{DecodeSeqs: 1, DecodeContextTokens: 512, Duration: 100 * time.Hour}, 1},
		// Empty step: neither prefill nor decode.
		{engine.StepStats{Duration: msDur(1)}, 1},
	}
	for _, s := range steps {
		for range s.reps {
			l.ObserveStep(s.st)
		}
	}
	st := l.Stats()
	want := LearnStats{Steps: 22, Prefill: 8, Decode: 4, Mixed: 3, OffGrid: 3, Outliers: 4, PrefillCells: 2, DecodeCells: 1}
	if st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
	p, err := l.Profile()
	if err != nil {
		t.Fatal(err)
	}
	base := seedProfile()
	// Learned cells hold 2× (TimeScale) the observed medians; the others
	// keep the base's values.
	wantPrefill := slices.Clone(base.Prefill.TTFTMs)
	wantPrefill[1] = []float64{50, 40, base.Prefill.TTFTMs[1][2]}
	for i := range wantPrefill {
		if !slices.Equal(p.Prefill.TTFTMs[i], wantPrefill[i]) {
			t.Errorf("prefill row %d: %v, want %v", i, p.Prefill.TTFTMs[i], wantPrefill[i])
		}
	}
	if got := p.Decode.ITLMs[1][1]; got != 10 {
		t.Errorf("decode (8, 4096): %v, want 10", got)
	}
	if p.Decode.ITLMs[0][0] != base.Decode.ITLMs[0][0] || p.Decode.ITLMs[2][1] != 0 {
		t.Errorf("decode fallback: %v", p.Decode.ITLMs)
	}
	if !strings.Contains(p.Worker, "learned") {
		t.Errorf("worker %q", p.Worker)
	}
	pc, dc := l.LearnedCells()
	if !pc[1][0] || !pc[1][1] || pc[0][0] || !dc[1][1] || dc[0][0] {
		t.Errorf("learned cells: prefill %v decode %v", pc, dc)
	}
	// The base is not modified.
	if !slices.Equal(base.Prefill.TTFTMs[1], seedProfile().Prefill.TTFTMs[1]) {
		t.Error("base modified")
	}
}

// TestLearnerRobust: outliers are dropped, the window is bounded and
// follows a change of level.
func TestLearnerRobust(t *testing.T) {
	l := newLearner(t, LearnConfig{})
	dec := func(ms float64) engine.StepStats {
		return engine.StepStats{DecodeSeqs: 1, DecodeContextTokens: 512, Duration: msDur(ms)}
	}
	for range 5 {
		l.ObserveStep(dec(6))
	}
	l.ObserveStep(dec(500)) // a stalled step
	l.ObserveStep(dec(0.1))
	if st := l.Stats(); st.Outliers != 2 || st.Decode != 5 {
		t.Fatalf("stats %+v", st)
	}
	p, _ := l.Profile()
	if got := p.Decode.ITLMs[0][0]; got != 6 {
		t.Fatalf("itl %v, want 6", got)
	}
	// A lasting change (within the outlier factor) takes over.
	for range 1000 {
		l.ObserveStep(dec(9))
	}
	if n := len(l.decode[0][0].ring); n != cellWindow {
		t.Fatalf("window %d, want %d", n, cellWindow)
	}
	p, _ = l.Profile()
	if got := p.Decode.ITLMs[0][0]; got != 9 {
		t.Fatalf("itl %v after the change, want 9", got)
	}
}

// FuzzLearnerObserve: any step is counted once and the learned profile
// always validates.
func FuzzLearnerObserve(f *testing.F) {
	f.Add(512, 512, 1, 0, 0, int64(20e6))
	f.Add(0, 0, 0, 8, 32000, int64(5e6))
	f.Add(-1, 1<<40, 1, 1, -5, int64(-1))
	f.Add(1024, 0, 1, 0, 0, int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, pt, pc, ps, ds, dc int, d int64) {
		l, err := NewProfileLearner(LearnConfig{Base: seedProfile(), MinSamples: 1})
		if err != nil {
			t.Fatal(err)
		}
		st := engine.StepStats{PrefillTokens: pt, PrefillCachedTokens: pc, PrefillSeqs: ps, DecodeSeqs: ds,
			DecodeContextTokens: dc, Duration: time.Duration(d)}
		l.ObserveStep(st)
		l.ObserveStep(st)
		s := l.Stats()
		if s.Steps != 2 || s.Prefill+s.Decode+s.Mixed+s.OffGrid+s.Outliers != 2 {
			t.Fatalf("stats %+v", s)
		}
		if _, err := l.Profile(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestProfileSource: each Step takes the source's newer profile for the
// pools on the default profile, not for one with its own.
func TestProfileSource(t *testing.T) {
	learned, own := seedProfile(), seedProfile()
	var next *Profile
	p, err := New(Config{
		Pools:   []Pool{{Name: "agg", Role: RoleAggregated, Min: 1, Max: 4}, {Name: "mine", Role: RoleAggregated, Min: 1, Max: 4}},
		Profile: seedProfile(), Profiles: map[string]*Profile{"mine": own},
		ProfileSource: func() *Profile { return next },
		Policy:        Tandem{}, Targets: Targets{TTFTMs: 500, ITLMs: 25, Quantile: 0.9}, Interval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Step(Observation{At: time.Unix(10, 0)})
	if p.pools[0].model.Profile == learned {
		t.Fatal("a nil source result replaced the profile")
	}
	next = learned
	p.Step(Observation{At: time.Unix(11, 0)})
	if p.pools[0].model.Profile != learned || p.pools[1].model.Profile != own {
		t.Fatalf("profiles after Step: agg %p mine %p (learned %p own %p)", p.pools[0].model.Profile, p.pools[1].model.Profile, learned, own)
	}
}
