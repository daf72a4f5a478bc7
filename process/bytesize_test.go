package process

import "testing"

func TestByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"512MiB", 512 << 20, true},
		{"1.5 GiB", 3 << 29, true},
		{"2GB", 2e9, true},
		{"4096", 4096, true},
		{"0", 0, false},
		{"-1KiB", 0, false},
		{"lots", 0, false},
		{"9e18GiB", 0, false}, // beyond int64: refused, not wrapped
		{"1e30", 0, false},
	} {
		var b ByteSize
		err := b.Set(tc.in)
		if (err == nil) != tc.ok || (tc.ok && int64(b) != tc.want) {
			t.Errorf("Set(%q) = %d, %v; want %d, ok %v", tc.in, int64(b), err, tc.want, tc.ok)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{12: "12 bytes", 2048: "2.0 KiB", 609 << 20: "609.0 MiB", 3 << 29: "1.50 GiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
