package engines

import "testing"

func TestParseByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"", 0, true}, {"4096", 4096, true}, {"64GiB", 64 << 30, true}, {"1.5TB", 1.5e12, true},
		{"512 MiB", 512 << 20, true}, {"10B", 10, true},
		{"-1GiB", 0, false}, {"lots", 0, false}, {"1e30", 0, false}, {"NaN", 0, false},
	} {
		got, err := ParseByteSize(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
