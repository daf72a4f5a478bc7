package sim

import (
	"math"
	"strings"
	"testing"
)

// FuzzLoadMooncake: any input is refused with an error or gives requests
// whose values are within the ranges Run accepts, never a panic.
func FuzzLoadMooncake(f *testing.F) {
	f.Add(`{"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [0, 1, 2, 3]}`+"\n"+
		`{"timestamp": 2000, "input_length": 100, "output_length": 1, "hash_ids": [0]}`, 1.0)
	f.Add(`{"timestamp": -1, "input_length": 1, "output_length": 1}`, 6.0)
	f.Add(`{"timestamp": 1e300, "input_length": 1, "output_length": 1}`, 1e-300)
	f.Add(`{"input_length": 99999999999, "output_length": 1}`, 2.0)
	f.Add("\n\n{}\n", 1.0)
	f.Add(`not json`, 1.0)
	f.Fuzz(func(t *testing.T, in string, speedup float64) {
		rs, err := LoadMooncake(strings.NewReader(in), speedup, 131072)
		if err != nil {
			if rs != nil || !strings.HasPrefix(err.Error(), "sim: ") {
				t.Fatalf("error %q with %d requests", err, len(rs))
			}
			return
		}
		for i, r := range rs {
			if math.IsNaN(r.At) || math.IsInf(r.At, 0) || r.At < 0 || r.ISL < 1 || r.OSL < 0 || r.ISL+r.OSL > 131072 {
				t.Fatalf("request %d out of range: %+v", i, r)
			}
		}
	})
}

// TestLoadMooncakeErrors: bad lines are refused with the line named.
func TestLoadMooncakeErrors(t *testing.T) {
	for _, tc := range []struct {
		in      string
		speedup float64
		want    string
	}{
		{`{"timestamp": 0, "input_length": 10, "output_length": 1}` + "\n" + `{"timestamp": -5, "input_length": 10, "output_length": 1}`, 1, "line 2: timestamp -5"},
		{`{"timestamp": 0, "input_length": 0, "output_length": 1}`, 1, "line 1: input_length 0"},
		{`{"timestamp": 0, "input_length": 10, "output_length": -1}`, 1, "line 1: output_length -1"},
		{`{"timestamp": 0, "input_length": 10`, 1, "line 1:"},
		{`{"timestamp": 0, "input_length": 10, "output_length": 1}`, 0, "speedup 0"},
		{`{"timestamp": 0, "input_length": 10, "output_length": 1}`, math.Inf(1), "speedup +Inf"},
		{`{"timestamp": 1e12, "input_length": 10, "output_length": 1}`, 1e-300, "after the speedup"},
		{"", 1, "empty"},
	} {
		_, err := LoadMooncake(strings.NewReader(tc.in), tc.speedup, 0)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q ×%v: %v, want an error containing %q", tc.in, tc.speedup, err, tc.want)
		}
	}
}
