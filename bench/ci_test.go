package bench

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestTQuantile checks the t quantiles against the published table
// (NIST/SEMATECH e-Handbook of Statistical Methods, table 1.3.6.7.2).
func TestTQuantile(t *testing.T) {
	cases := []struct {
		p, df, want float64
	}{
		{0.975, 1, 12.706}, {0.975, 2, 4.303}, {0.975, 3, 3.182}, {0.975, 4, 2.776}, {0.975, 5, 2.571},
		{0.975, 9, 2.262}, {0.975, 10, 2.228}, {0.975, 20, 2.086}, {0.975, 30, 2.042}, {0.975, 100, 1.984},
		{0.95, 1, 6.314}, {0.95, 10, 1.812}, {0.99, 5, 3.365}, {0.995, 2, 9.925}, {0.90, 3, 1.638},
		{0.975, 1e6, 1.960}, {0.025, 4, -2.776}, {0.5, 7, 0},
	}
	for _, c := range cases {
		got := TQuantile(c.p, c.df)
		if math.Abs(got-c.want) > 0.0006 {
			t.Errorf("TQuantile(%v, %v) = %.5f, want %.3f", c.p, c.df, got, c.want)
		}
	}
	for _, bad := range [][2]float64{{0, 3}, {1, 3}, {0.9, 0}, {math.NaN(), 2}, {0.9, -1}} {
		if v := TQuantile(bad[0], bad[1]); !math.IsNaN(v) {
			t.Errorf("TQuantile(%v, %v) = %v, want NaN", bad[0], bad[1], v)
		}
	}
}

func TestMeanCI(t *testing.T) {
	// 10, 12, 14: mean 12, sd 2, half = 4.303 × 2 / √3 = 4.9686.
	c := MeanCI([]float64{10, 12, 14})
	if c.N != 3 || c.Mean != 12 || math.Abs(c.SD-2) > 1e-12 || math.Abs(c.Half-4.9686) > 1e-3 {
		t.Fatalf("MeanCI = %+v", c)
	}
	if !strings.HasPrefix(c.String(), "12.00 ± 4.97") {
		t.Fatalf("String = %q", c.String())
	}
	one := MeanCI([]float64{5})
	if one.Defined() || one.Mean != 5 {
		t.Fatalf("one trial: %+v", one)
	}
	b, err := json.Marshal(one)
	if err != nil || !strings.Contains(string(b), `"half":null`) {
		t.Fatalf("one trial JSON %s, %v", b, err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if MeanCI(nil).String() != "-" {
		t.Fatal("empty")
	}
}
