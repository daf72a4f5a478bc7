package native

import (
	"strings"
	"testing"
)

func TestMeminfoAvailable(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"MemTotal:       24683520 kB\nMemFree:        18586788 kB\nMemAvailable:   23863264 kB\n", 23863264 << 10, true},
		{"MemTotal: 1 kB\n", 0, false},
		{"MemAvailable: x kB\n", 0, false},
		{"MemAvailable: -5 kB\n", 0, false},
		{"", 0, false},
	} {
		got, ok := meminfoAvailable([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: %d %v, want %d %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestPlanKV: the KV pool's size from the flag, the model's context and
// the machine's memory.
func TestPlanKV(t *testing.T) {
	const bs = 16
	const bb = 1 << 20 // bytes per block
	gib := func(n int64) int64 { return n << 30 }
	for _, tc := range []struct {
		name       string
		explicit   int64
		ctx        int
		workers    int
		unresident int64
		mem        machineMemory
		blocks     int
		ctxLen     int
		by         string
	}{
		{"flag", 512 << 20, 4096, 1, 0, machineMemory{avail: gib(64), ok: true}, 512, 4096, "--kv-cache-bytes"},
		{"flag below a context", 8 << 20, 4096, 1, 0, machineMemory{avail: gib(64), ok: true}, 257, 4096, "--kv-cache-bytes"},
		{"one full context fits", 0, 4096, 2, 0, machineMemory{avail: gib(16), ok: true}, 257, 4096, "fits"},
		{"256 MiB for a short context", 0, 512, 1, 0, machineMemory{avail: gib(16), ok: true}, 256, 512, "fits"},
		{"unknown machine", 0, 4096, 1, 0, machineMemory{}, 257, 4096, "unknown"},
		// 1 GiB available, half of it split between 2 workers: 256
		// blocks each, less than one 4096-token context.
		{"shortened", 0, 4096, 2, 0, machineMemory{avail: gib(1), ok: true}, 256, 255 * bs, "shortened"},
		{"weights not resident count", 0, 4096, 1, gib(1) - 300<<20, machineMemory{avail: gib(1), ok: true}, 150, 149 * bs, "shortened"},
		{"never below the floor", 0, 4096, 8, 0, machineMemory{avail: 1 << 20, ok: true}, 33, 512, "shortened"},
		{"floor capped by the model", 0, 256, 8, 0, machineMemory{avail: 1 << 20, ok: true}, 17, 256, "shortened"},
		{"between a context and the floor", 0, 128, 1, 0, machineMemory{avail: 400 << 20, ok: true}, 200, 128, "what fits, at least one full context"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planKV(tc.explicit, tc.ctx, bs, bb, tc.workers, tc.unresident, tc.mem)
			if p.blocks != tc.blocks || p.ctxLen != tc.ctxLen || !strings.Contains(p.sizedBy, tc.by) {
				t.Errorf("got %d blocks, context %d (%q); want %d, %d, %q", p.blocks, p.ctxLen, p.sizedBy, tc.blocks, tc.ctxLen, tc.by)
			}
			if p.ctxLen > (p.blocks-1)*bs {
				t.Errorf("context %d does not fit %d blocks of %d", p.ctxLen, p.blocks, bs)
			}
		})
	}
}
