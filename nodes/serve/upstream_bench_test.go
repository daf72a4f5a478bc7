package serve

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
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
// frontend, router and the extra HTTP hop (docs/benchmarks.md sets it
// beside Dynamo's frontend).
func BenchmarkUpstreamOverhead(b *testing.B) {
	// The seeds measured 512-token prompts and 128 output tokens; the
	// short case isolates the fixed cost.
	long, _ := json.Marshal(map[string]any{"model": "tandem-mock", "max_tokens": 128, "ignore_eos": true, "stream": true,
		"messages": []map[string]string{{"role": "user", "content": strings.Repeat("word ", 505)}}})
	for _, tc := range []struct {
		name string
		body []byte
	}{{"short", benchBody}, {"512-in-128-out", long}} {
		b.Run(tc.name, func(b *testing.B) { upstreamOverhead(b, tc.body) })
	}
}

func upstreamOverhead(b *testing.B, body []byte) {
	server, model, _ := startBench(b, "inproc", 1)
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.Workers = "127.0.0.1:0", 1
	// The engine's client as upstream.NewClient makes it, counting the
	// connections it dials: a stream whose connection is not reused costs
	// the next request a dial (dials/req, near 0 when connections are
	// reused).
	var dials atomic.Int64
	client := upstream.NewClient()
	tr := client.Transport.(*http.Transport)
	dialer := &net.Dialer{}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dialer.DialContext(ctx, network, addr)
	}
	front, err := Start(cfg, model, func(int) (engine.Engine, error) {
		return upstream.New(context.Background(), upstream.Config{URL: server.URL(), Client: client})
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = front.Shutdown(context.Background()) })
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	ttft := func(url string) time.Duration {
		d, _, err := streamBody(c, url, body)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	for range 200 { // connections and pools, both hops
		ttft(server.URL())
		ttft(front.URL())
	}
	var via, direct []time.Duration
	dialed := dials.Load()
	b.ResetTimer()
	for range b.N {
		via = append(via, ttft(front.URL()))
		direct = append(direct, ttft(server.URL()))
	}
	b.StopTimer()
	b.ReportMetric(float64(dials.Load()-dialed)/float64(b.N), "dials/req")
	if len(via) < 20 {
		return
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(us(pct(direct, .5)), "direct-p50-µs")
	b.ReportMetric(us(pct(via, .5)), "via-tandem-p50-µs")
	b.ReportMetric(us(pct(via, .5)-pct(direct, .5)), "added-p50-µs")
	b.ReportMetric(us(pct(via, .99)-pct(direct, .99)), "added-p99-µs")
}
