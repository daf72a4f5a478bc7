package httpapi

import (
	"strings"
	"testing"
)

func TestStopMatcher(t *testing.T) {
	tests := []struct {
		name    string
		stops   []string
		pieces  []string
		want    string
		stopped bool
		end     int // where the match ends in the held text + the last piece
	}{
		{"no stops", nil, []string{"a", "b"}, "ab", false, 0},
		{"inside one piece", []string{"END"}, []string{"abENDcd"}, "ab", true, 5},
		{"across pieces", []string{"END"}, []string{"ab", "E", "N", "Dxx"}, "ab", true, 3},
		{"false start flushed", []string{"END"}, []string{"ab", "EN", "x"}, "abENx", false, 0},
		{"held at end flushed", []string{"END"}, []string{"abE"}, "abE", false, 0},
		{"earliest of several", []string{"yz", "b"}, []string{"abyz"}, "a", true, 2},
		{"multibyte", []string{"é!"}, []string{"caf", "é", "!", "z"}, "caf", true, 3},
		{"overlapping prefix", []string{"aab"}, []string{"a", "a", "a", "b"}, "a", true, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := stopMatcher{stops: tc.stops}
			var out strings.Builder
			stopped := false
			for _, p := range tc.pieces {
				e, s := m.push(p)
				out.WriteString(e)
				if s {
					stopped = true
					break
				}
			}
			if !stopped {
				out.WriteString(m.flush())
			}
			if out.String() != tc.want || stopped != tc.stopped {
				t.Fatalf("got %q stopped=%v, want %q %v", out.String(), stopped, tc.want, tc.stopped)
			}
			if stopped && m.end != tc.end {
				t.Fatalf("match end %d, want %d", m.end, tc.end)
			}
		})
	}
}
