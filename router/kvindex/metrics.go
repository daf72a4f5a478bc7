package kvindex

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// counters are plain atomics read by a collector at scrape time, so applying
// millions of events per second costs no Prometheus bookkeeping per event.
type counters struct {
	storedEvents, stored, removed, cleared atomic.Uint64
	parentMissing, blockMissing, invalid   atomic.Uint64
	blockSizeMismatch, ignored, unknown    atomic.Uint64
	pruned, expired                        atomic.Uint64
}

func (c *counters) add(s *ApplyStats) {
	add := func(a *atomic.Uint64, n int) {
		if n != 0 {
			a.Add(uint64(n))
		}
	}
	add(&c.storedEvents, s.StoredEvents)
	add(&c.stored, s.Stored)
	add(&c.removed, s.Removed)
	add(&c.cleared, s.Cleared)
	add(&c.parentMissing, s.ParentMissing)
	add(&c.blockMissing, s.BlockMissing)
	add(&c.invalid, s.Invalid)
	add(&c.blockSizeMismatch, s.BlockSizeMismatch)
	add(&c.ignored, s.Ignored)
	add(&c.unknown, s.Unknown)
}

func (c *counters) snapshot() ApplyStats {
	return ApplyStats{
		StoredEvents:      int(c.storedEvents.Load()),
		Stored:            int(c.stored.Load()),
		Removed:           int(c.removed.Load()),
		Cleared:           int(c.cleared.Load()),
		ParentMissing:     int(c.parentMissing.Load()),
		BlockMissing:      int(c.blockMissing.Load()),
		Invalid:           int(c.invalid.Load()),
		BlockSizeMismatch: int(c.blockSizeMismatch.Load()),
		Ignored:           int(c.ignored.Load()),
		Unknown:           int(c.unknown.Load()),
	}
}

type collector struct {
	ix                                  *Index
	blocks, hashes, workers, slabBytes  *prometheus.Desc
	pruned, expired, events, blockCount *prometheus.Desc
}

func newCollector(ix *Index) *collector {
	l := prometheus.Labels{"index": ix.name}
	d := func(name, help string, vars ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, vars, l)
	}
	return &collector{
		ix:         ix,
		blocks:     d("tandem_kvindex_blocks", "Residences (worker, block) held by the index."),
		hashes:     d("tandem_kvindex_distinct_blocks", "Distinct block hashes held by the index."),
		workers:    d("tandem_kvindex_workers", "Workers registered with the index."),
		slabBytes:  d("tandem_kvindex_slab_bytes", "Bytes of the residence slab (maps excluded)."),
		pruned:     d("tandem_kvindex_pruned_blocks_total", "Residences pruned, least recently used first, to stay under --index-max-blocks."),
		expired:    d("tandem_kvindex_expired_blocks_total", "Approximate residences dropped after their TTL."),
		events:     d("tandem_kvindex_events_total", "KV events applied, by type and outcome.", "type", "status"),
		blockCount: d("tandem_kvindex_block_events_total", "Blocks stored or removed by KV events.", "op"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.blocks, c.hashes, c.workers, c.slabBytes, c.pruned, c.expired, c.events, c.blockCount} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ix := c.ix
	ix.mu.RLock()
	blocks, hashes, workers, slab := ix.nodes.live, ix.heads.len(), len(ix.byID), ix.nodes.bytes()
	ix.mu.RUnlock()
	g := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	g(c.blocks, blocks)
	g(c.hashes, hashes)
	g(c.workers, workers)
	g(c.slabBytes, slab)
	ch <- prometheus.MustNewConstMetric(c.pruned, prometheus.CounterValue, float64(ix.st.pruned.Load()))
	ch <- prometheus.MustNewConstMetric(c.expired, prometheus.CounterValue, float64(ix.st.expired.Load()))
	s := ix.st.snapshot()
	ev := func(typ, status string, v int) {
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(v), typ, status)
	}
	ev("stored", "ok", s.StoredEvents)
	ev("stored", "parent_not_found", s.ParentMissing)
	ev("stored", "invalid", s.Invalid)
	ev("stored", "block_size_mismatch", s.BlockSizeMismatch)
	ev("removed", "block_not_found", s.BlockMissing)
	ev("cleared", "ok", s.Cleared)
	ev("any", "other_tier", s.Ignored)
	ev("unknown", "skipped", s.Unknown)
	ch <- prometheus.MustNewConstMetric(c.blockCount, prometheus.CounterValue, float64(s.Stored), "stored")
	ch <- prometheus.MustNewConstMetric(c.blockCount, prometheus.CounterValue, float64(s.Removed), "removed")
}
