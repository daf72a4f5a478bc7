package planner

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// seedProfile is a small valid profile.
func seedProfile() *Profile {
	return &Profile{Version: ProfileVersion, Worker: "seed", KVCapacityTokens: 65536, MaxNumSeqs: 64, MaxNumBatchedTokens: 2048,
		Prefill: PrefillGrid{ISL: []float64{128, 1024, 4096}, CachedFraction: []float64{0, 0.5, 0.9},
			TTFTMs: [][]float64{{20, 17, 15}, {60, 35, 19}, {200, 110, 35}}},
		Decode: DecodeGrid{Concurrency: []float64{1, 8, 64}, Context: []float64{512, 4096},
			ITLMs: [][]float64{{6, 6.5}, {7, 12}, {15, 0}}}}
}

// FuzzReadProfile: any input is either refused with an error or gives a
// profile whose interpolations are finite, non-negative numbers (ITL may
// be +Inf: "does not fit"), never NaN and never a panic.
func FuzzReadProfile(f *testing.F) {
	b, _ := json.Marshal(seedProfile())
	f.Add(b)
	f.Add([]byte(`{"version":1,"kv_capacity_tokens":1,"prefill":{"isl":[1],"cached_fraction":[0],"ttft_ms":[[1]]},"decode":{"concurrency":[1],"context":[1],"itl_ms":[[1]]}}`))
	f.Add([]byte(`{"version":1,"kv_capacity_tokens":1e300}`))
	f.Add([]byte(`{"version":1,"kv_capacity_tokens":100,"prefill":{"isl":[1,1e308],"cached_fraction":[0,1],"ttft_ms":[[1,1],[1e308,1e308]]}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := ReadProfile(bytes.NewReader(in))
		if err != nil {
			if p != nil || !strings.HasPrefix(err.Error(), "planner: profile") {
				t.Fatalf("error %q (profile %v): want a planner: profile error and no profile", err, p)
			}
			return
		}
		for _, isl := range []float64{0, 1, 100, 5000, 1 << 20, 1 << 24} {
			for _, cf := range []float64{-1, 0, 0.3, 1, 2} {
				if v := p.PrefillMs(isl, cf); math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					t.Fatalf("PrefillMs(%v, %v) = %v", isl, cf, v)
				}
			}
		}
		for _, c := range []float64{1, 3, 100, 1 << 20} {
			for _, x := range []float64{1, 700, 1 << 20} {
				if v := p.ITLMs(c, x); math.IsNaN(v) || v < 0 {
					t.Fatalf("ITLMs(%v, %v) = %v", c, x, v)
				}
			}
			if v := p.MaxConcurrency(20, float64(c)); math.IsNaN(v) || v < 0 {
				t.Fatalf("MaxConcurrency = %v", v)
			}
		}
		// What is accepted round-trips.
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ReadProfile(bytes.NewReader(out)); err != nil {
			t.Fatalf("re-reading an accepted profile: %v", err)
		}
	})
}

// TestProfileRangeErrors: each out-of-range field is refused with an
// error naming it.
func TestProfileRangeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		mod        func(p *Profile)
	}{
		{"version", "version", func(p *Profile) { p.Version = 2 }},
		{"kv capacity", "kv_capacity_tokens", func(p *Profile) { p.KVCapacityTokens = 0 }},
		{"max seqs", "max_num_seqs", func(p *Profile) { p.MaxNumSeqs = -1 }},
		{"isl decreasing", "prefill.isl[1]", func(p *Profile) { p.Prefill.ISL[1] = 100 }},
		{"isl huge", "prefill.isl[2]", func(p *Profile) { p.Prefill.ISL[2] = 1e300 }},
		{"cached above 1", "cached_fraction", func(p *Profile) { p.Prefill.CachedFraction[2] = 1.5 }},
		{"ttft rows", "prefill.ttft_ms: 2 rows", func(p *Profile) { p.Prefill.TTFTMs = p.Prefill.TTFTMs[:2] }},
		{"ttft cols", "prefill.ttft_ms[1]: 2 columns", func(p *Profile) { p.Prefill.TTFTMs[1] = []float64{1, 2} }},
		{"ttft zero", "prefill.ttft_ms[0][0]", func(p *Profile) { p.Prefill.TTFTMs[0][0] = 0 }},
		{"ttft huge", "prefill.ttft_ms[0][1]", func(p *Profile) { p.Prefill.TTFTMs[0][1] = 1e300 }},
		{"itl negative", "decode.itl_ms[1][1]", func(p *Profile) { p.Decode.ITLMs[1][1] = -3 }},
		{"concurrency huge", "decode.concurrency[2]", func(p *Profile) { p.Decode.Concurrency[2] = 1e12 }},
		{"context zero", "decode.context[0]", func(p *Profile) { p.Decode.Context[0] = 0 }},
		{"nothing fits", "no point that fits", func(p *Profile) { p.Decode.ITLMs = [][]float64{{0, 0}, {0, 0}, {0, 0}} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := seedProfile()
			tc.mod(p)
			err := p.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error naming %q", err, tc.want)
			}
		})
	}
	if err := seedProfile().Validate(); err != nil {
		t.Fatal(err)
	}
}
