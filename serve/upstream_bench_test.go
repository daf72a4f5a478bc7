package serve

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/upstream"
)

// BenchmarkUpstreamOverhead is the seeds' frontend measurement in the
// seeds' shape: a router-frontend in front of a vLLM-compatible server.
// The server is a Tandem system with one instant mocker worker (HTTP, SSE);
// the front is `tandem serve --engine upstream` pointed at it. Requests
// alternate between the server directly and through the front, so noise
// hits both; added = TTFT through the front − TTFT direct: Tandem's
// frontend, router and the extra HTTP hop. Dynamo's frontend added 13 ms.
func BenchmarkUpstreamOverhead(b *testing.B) {
	server, model, _ := startBench(b, "inproc", 1)
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.Workers = "127.0.0.1:0", 1
	front, err := Start(cfg, model, func(int) (engine.Engine, error) {
		return upstream.New(context.Background(), upstream.Config{URL: server.URL()})
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = front.Shutdown(context.Background()) })
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	for range 200 { // connections and pools, both hops
		for _, u := range []string{server.URL(), front.URL()} {
			if _, err := ttftHTTP(c, u); err != nil {
				b.Fatal(err)
			}
		}
	}
	var via, direct []time.Duration
	b.ResetTimer()
	for range b.N {
		f, err := ttftHTTP(c, front.URL())
		if err != nil {
			b.Fatal(err)
		}
		d, err := ttftHTTP(c, server.URL())
		if err != nil {
			b.Fatal(err)
		}
		via, direct = append(via, f), append(direct, d)
	}
	b.StopTimer()
	if len(via) < 20 {
		return
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(us(pct(direct, .5)), "direct-p50-µs")
	b.ReportMetric(us(pct(via, .5)), "via-tandem-p50-µs")
	b.ReportMetric(us(pct(via, .5)-pct(direct, .5)), "added-p50-µs")
	b.ReportMetric(us(pct(via, .99)-pct(direct, .99)), "added-p99-µs")
}
