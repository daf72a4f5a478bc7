package frontend

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkDisaggDecisionOverhead prices being disaggregation-ready when
// the decision is local: two frontends share one decode and one prefill
// worker (instant mockers, real gRPC request planes); one runs with
// --disagg never, the other with auto. The prompt is cached on the decode
// worker, so auto asks both workers (Assess, in parallel) and keeps it
// local. Requests alternate between the two frontends, so machine noise
// hits both alike; the figures are the latency auto adds at p50 and p99
// and the p50 ratio.
//
// With --router-mode kv the router's prediction (the prompt is cached on
// the decode worker it picks) spares the assessments.
func BenchmarkDisaggDecisionOverhead(b *testing.B) {
	for _, mode := range []string{"round-robin", "kv"} {
		b.Run(mode, func(b *testing.B) { decisionOverhead(b, mode) })
	}
}

func decisionOverhead(b *testing.B, mode string) {
	h := newHarnessWith(b, mode, func(c *Config) { c.Disagg.Mode = "never" }, Options{})
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.Disagg.Mode, cfg.RouterMode, cfg.KV.Seed = "127.0.0.1:0", "auto", mode, 1
	auto, err := Start(context.Background(), cfg, h.model, Options{Registry: h.reg, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = auto.Shutdown(context.Background()) })
	h.startRole("d0", "decode", 1000, nil)
	h.startRole("p0", "prefill", 1000, nil)
	h.waitMembers("d0", "p0")
	for !slices.Equal(auto.Members(), []string{"d0", "p0"}) {
		time.Sleep(5 * time.Millisecond)
	}
	body := fmt.Sprintf(`{"model":"tandem-mock","prompt":%q,"max_tokens":1,"ignore_eos":true}`,
		strings.Repeat("The cartographer drew the coast again from memory. ", 40))
	hc := &http.Client{}
	send := func(url string) time.Duration {
		start := time.Now()
		resp, err := hc.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(start)
	}
	for range 100 { // connections, and the prompt in the decode worker's cache
		send(h.fe.URL())
		send(auto.URL())
	}
	var dn, da []time.Duration
	b.ResetTimer()
	for range b.N {
		dn = append(dn, send(h.fe.URL()))
		da = append(da, send(auto.URL()))
	}
	b.StopTimer()
	slices.Sort(dn)
	slices.Sort(da)
	q := func(d []time.Duration, p float64) float64 { return float64(d[int(p*float64(len(d)-1))]) / 1e3 }
	b.ReportMetric(q(dn, 0.5), "never-p50-µs")
	b.ReportMetric(q(da, 0.5)-q(dn, 0.5), "added-p50-µs")
	b.ReportMetric(q(da, 0.99)-q(dn, 0.99), "added-p99-µs")
	b.ReportMetric(q(da, 0.5)/q(dn, 0.5), "p50-ratio")
}
