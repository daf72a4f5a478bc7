package router

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"

	"github.com/tandemllm/tandem/planes/kvevents"
)

// BenchmarkTierIndexMemory reports the kv policy's heap per residence (a
// block one worker holds in one tier), all its event indexes together:
// a worker without tiers (pool blocks: the events index alone), and a
// tiered worker's pool, host and disk blocks (the events index plus the
// pool-only and host indexes that price a hit by tier). Every block is
// held by one worker; 100 workers.
func BenchmarkTierIndexMemory(b *testing.B) {
	const (
		bs    = 16
		nw    = 100
		total = 1 << 18
		per   = 64 // blocks per event
	)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name   string
		tiered bool
		medium string
	}{
		{"untiered-g1", false, ""},
		{"tiered-g1", true, ""},
		{"tiered-g2", true, "CPU"},
		{"tiered-g3", true, "STORAGE"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				kv, err := NewKV(b.Context(), KVConfig{BlockSize: bs, Seed: 1, IndexMaxBlocks: 2 * total, Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				seqs := make([]uint64, nw)
				for w := range nw {
					id := fmt.Sprint("worker-", w)
					if err := kv.AddWorker(id, "", "", bs); err != nil {
						b.Fatal(err)
					}
					if tc.tiered {
						// One host block first: the worker is tiered from
						// then on (its pool and host indexes are kept).
						ev := kvevents.Event{Type: kvevents.TypeBlockStored, BlockSize: bs, TokenIDs: make([]int32, bs),
							BlockHashes: []kvevents.Hash{kvevents.IntHash(uint64(w+1) << 40)}, Medium: "CPU"}
						if err := kv.Ingest(id, seqs[w], &kvevents.Batch{Events: []kvevents.Event{ev}}); err != nil {
							b.Fatal(err)
						}
						seqs[w]++
					}
				}
				toks := make([]int32, bs*per)
				held := 0
				for next := uint64(1); held < total; next++ {
					for i := range toks {
						toks[i] = int32(next*1000 + uint64(i))
					}
					w := int(next) % nw
					ev := kvevents.Event{Type: kvevents.TypeBlockStored, BlockSize: bs, TokenIDs: toks, Medium: tc.medium}
					for j := range per {
						ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(next<<8|uint64(j)))
					}
					if err := kv.Ingest(fmt.Sprint("worker-", w), seqs[w], &kvevents.Batch{Events: []kvevents.Event{ev}}); err != nil {
						b.Fatal(err)
					}
					seqs[w]++
					held += per
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(held), "B/residence")
				runtime.KeepAlive(kv)
				kv.Close()
			}
		})
	}
}
