package accuracy

import (
	"testing"
	"time"
)

// TestPrefixDrift: the prefix check raises once half the window is in and
// too few predictions were within one block, and clears when enough are
// again; a closed check grades nothing.
func TestPrefixDrift(t *testing.T) {
	tests := []struct {
		name              string
		predicted, actual []int
		wantRaise         int // index of the grade that raises (-1: none)
		wantClear         int
	}{
		{"accurate", []int{4, 4, 4, 4}, []int{4, 5, 3, 4}, -1, -1},
		{"off until half full", []int{8, 8, 8, 8}, []int{0, 0, 0, 0}, 1, -1},
		{"off then right", []int{8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8}, []int{0, 0, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8}, 1, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Prefix
			p.Init(4, DefaultThreshold, DefaultRecoverRate)
			raise, clear := -1, -1
			for i := range tt.predicted {
				v, ok := p.Grade(tt.predicted[i], tt.actual[i], tt.actual[i]*16, 256)
				if !ok {
					t.Fatal("open check refused a grade")
				}
				if v.Raise && raise < 0 {
					raise = i
				}
				if v.Clear && clear < 0 {
					clear = i
				}
			}
			if raise != tt.wantRaise || clear != tt.wantClear {
				t.Errorf("raised at %d, cleared at %d; want %d, %d", raise, clear, tt.wantRaise, tt.wantClear)
			}
			p.Close()
			if _, ok := p.Grade(1, 1, 16, 16); ok {
				t.Error("closed check graded")
			}
		})
	}
}

// TestPrefixVerdict: the window's ratios.
func TestPrefixVerdict(t *testing.T) {
	var p Prefix
	p.Init(8, DefaultThreshold, DefaultRecoverRate)
	p.Grade(4, 4, 64, 128)        // close, confirmed hit
	v, _ := p.Grade(4, 0, 0, 128) // off, unconfirmed hit
	if v.N != 2 || v.Ratio != 0.5 || v.Hit != 0.5 || v.CacheHit != 0.25 || v.PredictedMean != 4 || v.ActualMean != 2 {
		t.Errorf("verdict %+v", v)
	}
}

// TestTTFTDrift: ttft_model_drift needs TTFTMinimum first tokens, raises
// above TTFTRaise, clears below TTFTClear; Forget ends it once.
func TestTTFTDrift(t *testing.T) {
	var m TTFT
	for i := range TTFTMinimum {
		_, raised, _ := m.Observe(10*time.Millisecond, 40*time.Millisecond) // error 0.75
		if raised != (i == TTFTMinimum-1) {
			t.Fatalf("first token %d: raised %v", i, raised)
		}
	}
	if !m.Drifting() || m.MeanError() != 0.75 {
		t.Fatalf("drifting %v, mean %v", m.Drifting(), m.MeanError())
	}
	cleared := false
	for range 3 * TTFTWindow {
		_, _, c := m.Observe(10*time.Millisecond, 10*time.Millisecond)
		cleared = cleared || c
	}
	if !cleared || m.Drifting() {
		t.Fatalf("not cleared after accurate predictions (mean %v)", m.MeanError())
	}
	if m.Forget() {
		t.Error("Forget reported a drift that had cleared")
	}
}
