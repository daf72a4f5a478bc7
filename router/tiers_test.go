package router

import (
	"testing"

	"github.com/tandemllm/tandem/blockhash"
	"github.com/tandemllm/tandem/engine"
)

// onboardTiming is fakeTiming for an engine with KV tiers: onboarding n
// tokens from below its pool takes perTok·n seconds.
type onboardTiming struct {
	fakeTiming
	perTok float64
}

func (o onboardTiming) EstimateOnboard(n int) float64 { return o.perTok * float64(n) }

// TestTTFTCostPricesOnboard: w0 holds the prompt's prefix in its pool, w1
// holds it only in host memory (offloaded: BlockStored with medium CPU).
// The choice follows the predicted TTFT: w0 when it is idle (a pool hit
// beats any copy), w1 when w0's queue is longer than w1's copy takes, and
// w0 again when the copy is slower than that queue.
func TestTTFTCostPricesOnboard(t *testing.T) {
	base := fakeTiming{base: 0.0136, perTok: 0.0436e-3, dec: 0.010} // the seeds' Qwen3-0.6B
	for _, tc := range []struct {
		name    string
		onboard float64 // seconds per token
		w0Busy  bool
		want    string
	}{
		{"idle pool hit beats a fast copy", 1e-6, false, "w0"},
		{"fast copy beats a queue", 1e-6, true, "w1"},
		{"slow copy loses to the queue", 1e-3, true, "w0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := newTTFTFixture(t, 2, CostTTFT, base)
			for _, w := range f.r.Workers() {
				w.Timing = onboardTiming{base, tc.onboard}
				f.r.AddWorker(w)
			}
			pre := prompt(7, 375) // 1,500 tokens
			f.ingest(t, "w0", 0, storedEvent(pre, 1))
			cpu := storedEvent(pre, 1)
			cpu.Medium = "CPU"
			f.ingest(t, "w1", 0, cpu)
			if tc.w0Busy {
				// A cold 2,000-token prefill routed to w0, not yet answered:
				// ≈ 0.1 s of virtual queue.
				f.kv.Routed(&Request{Model: "m", Tokens: prompt(20, 500)}, Decision{WorkerID: "w0"})
			}
			req := append(append([]engine.Token(nil), pre...), prompt(8, 6)...)
			d, err := f.kv.Pick(&Request{Model: "m", Tokens: req}, []Candidate{{ID: "w0"}, {ID: "w1"}})
			if err != nil {
				t.Fatal(err)
			}
			if d.WorkerID != tc.want {
				t.Fatalf("chose %s, want %s (decision %+v)", d.WorkerID, tc.want, d)
			}
			// Both workers are credited with the prefix.
			if d.PredictedCachedTokens < len(pre)-tbs {
				t.Fatalf("predicted cached %d of a %d-token prefix", d.PredictedCachedTokens, len(pre))
			}
		})
	}
}

// sharedTiming is an engine with host and disk tiers whose disk it shares
// with the other workers named share: onboarding prices host and disk
// tokens at their own rates.
type sharedTiming struct {
	fakeTiming
	host, disk float64 // seconds per token
	share      string
}

func (o sharedTiming) EstimateOnboard(n int) float64 { return o.host * float64(n) }
func (o sharedTiming) EstimateOnboardTiers(host, disk int) float64 {
	return o.host*float64(host) + o.disk*float64(disk)
}
func (o sharedTiming) KVSharedTier() string { return o.share }

// TestTTFTCostPricesSharedTier: w0 holds the prompt's prefix in its pool;
// w2 wrote it to the disk it shares with w1 (BlockStored with medium
// STORAGE on w2's stream), so w1, which never saw it, can onboard it.
// The choice between w0's pool hit and w1's onboard follows the predicted
// TTFT, the onboard priced at the disk's rate, not the host link's.
func TestTTFTCostPricesSharedTier(t *testing.T) {
	base := fakeTiming{base: 0.0136, perTok: 0.0436e-3, dec: 0.010}
	for _, tc := range []struct {
		name   string
		disk   float64 // seconds per token
		w0Busy bool
		want   string
	}{
		{"idle pool hit beats a disk read", 1e-6, false, "w0"},
		{"fast shared disk beats a queue", 1e-6, true, "w1"},
		{"slow shared disk loses to the queue (a host-rate price would not)", 1e-4, true, "w0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := newTTFTFixture(t, 3, CostTTFT, base)
			for _, w := range f.r.Workers() {
				share := "host-a"
				if w.ID == "w0" {
					share = ""
				}
				w.Timing = sharedTiming{base, 1e-6, tc.disk, share}
				f.r.AddWorker(w)
			}
			pre := prompt(7, 375) // 1,500 tokens
			f.ingest(t, "w0", 0, storedEvent(pre, 1))
			disk := storedEvent(pre, 1)
			disk.Medium = "STORAGE"
			f.ingest(t, "w2", 0, disk)
			if tc.w0Busy {
				f.kv.Routed(&Request{Model: "m", Tokens: prompt(20, 500)}, Decision{WorkerID: "w0"})
			}
			req := append(append([]engine.Token(nil), pre...), prompt(8, 6)...)
			d, err := f.kv.Pick(&Request{Model: "m", Tokens: req}, []Candidate{{ID: "w0"}, {ID: "w1"}})
			if err != nil {
				t.Fatal(err)
			}
			if d.WorkerID != tc.want {
				t.Fatalf("chose %s, want %s (decision %+v)", d.WorkerID, tc.want, d)
			}
			if d.PredictedCachedTokens < len(pre)-tbs {
				t.Fatalf("predicted cached %d of a %d-token prefix", d.PredictedCachedTokens, len(pre))
			}
		})
	}
	// Leaving the shared tier: w2's next disk blocks are its own.
	f, _ := newTTFTFixture(t, 3, CostTTFT, base)
	for _, w := range f.r.Workers() {
		w.Timing = sharedTiming{base, 1e-6, 1e-6, "host-a"}
		f.r.AddWorker(w)
	}
	w2 := f.r.Workers()[2]
	w2.Timing = sharedTiming{base, 1e-6, 1e-6, ""}
	f.r.AddWorker(w2)
	pre := prompt(9, 100)
	disk := storedEvent(pre, 1)
	disk.Medium = "STORAGE"
	f.ingest(t, "w2", 0, disk)
	if got := f.kv.events.Lookup(new(blockhash.Hasher).Append(nil, 0, false, pre, tbs), nil); len(got) != 1 || got[0].Worker != "w2" {
		t.Fatalf("after w2 left the shared tier its disk blocks are held by %+v, want w2 alone", got)
	}
}

// sharedHostTiming is sharedTiming whose host-memory tier is shared too,
// with the workers named hostShare.
type sharedHostTiming struct {
	sharedTiming
	hostShare string
}

func (o sharedHostTiming) KVSharedHost() string { return o.hostShare }

// TestTTFTCostPricesSharedHost: w2 offloaded the prompt's prefix to the
// host-memory pool it shares with w1 (BlockStored with medium CPU on w2's
// stream), so w1, which never saw it, can onboard it over its host link.
// The choice between w0's pool hit and w1's onboard follows the predicted
// TTFT with the copy priced at the host link's rate, not the disk's; a
// worker outside the pool (w0's own host tier) does not hold it.
func TestTTFTCostPricesSharedHost(t *testing.T) {
	base := fakeTiming{base: 0.0136, perTok: 0.0436e-3, dec: 0.010}
	for _, tc := range []struct {
		name       string
		host, disk float64 // seconds per token
		w0Busy     bool
		want       string
	}{
		{"idle pool hit beats a host copy", 1e-6, 1e-4, false, "w0"},
		{"shared host copy beats a queue (a disk-rate price would not)", 1e-6, 1e-4, true, "w1"},
		{"slow host link loses to the queue", 1e-4, 1e-4, true, "w0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := newTTFTFixture(t, 3, CostTTFT, base)
			for _, w := range f.r.Workers() {
				share := "host-a"
				if w.ID == "w0" {
					share = ""
				}
				w.Timing = sharedHostTiming{sharedTiming{base, tc.host, tc.disk, ""}, share}
				f.r.AddWorker(w)
			}
			pre := prompt(7, 375) // 1,500 tokens
			f.ingest(t, "w0", 0, storedEvent(pre, 1))
			cpu := storedEvent(pre, 1)
			cpu.Medium = "CPU"
			f.ingest(t, "w2", 0, cpu)
			if tc.w0Busy {
				f.kv.Routed(&Request{Model: "m", Tokens: prompt(20, 500)}, Decision{WorkerID: "w0"})
			}
			req := append(append([]engine.Token(nil), pre...), prompt(8, 6)...)
			d, err := f.kv.Pick(&Request{Model: "m", Tokens: req}, []Candidate{{ID: "w0"}, {ID: "w1"}})
			if err != nil {
				t.Fatal(err)
			}
			if d.WorkerID != tc.want {
				t.Fatalf("chose %s, want %s (decision %+v)", d.WorkerID, tc.want, d)
			}
			if d.PredictedCachedTokens < len(pre)-tbs {
				t.Fatalf("predicted cached %d of a %d-token prefix", d.PredictedCachedTokens, len(pre))
			}
			// The pool's blocks are w1's as host blocks (a host copy, not
			// a disk read), and w0 holds none there.
			got := f.kv.events.LookupTiers(new(blockhash.Hasher).Append(nil, 0, false, pre, tbs), nil)
			host := map[int32]int32{}
			for _, o := range got {
				host[o.Tag] = o.Host - o.Pool
			}
			slot := func(id string) int32 { return int32(f.kv.workerFor(id).slot) }
			if host[slot("w1")] == 0 || host[slot("w2")] == 0 || host[slot("w0")] != 0 {
				t.Fatalf("host blocks by slot %v", host)
			}
		})
	}
}
