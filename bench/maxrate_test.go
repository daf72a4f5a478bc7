package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// cannedServer answers every request with the same prebuilt 16-chunk SSE
// stream: the cheapest server possible, so a benchmark against it shows
// the load generator's own ceiling.
func cannedServer(b *testing.B) *httptest.Server {
	var sb strings.Builder
	sb.WriteString(`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n")
	for k := range 16 {
		fmt.Fprintf(&sb, `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" w%d"},"finish_reason":null}]}`+"\n\n", k)
	}
	sb.WriteString(`data: {"choices":[],"usage":{"prompt_tokens":64,"completion_tokens":16,"total_tokens":80,"prompt_tokens_details":{"cached_tokens":0}}}` + "\n\ndata: [DONE]\n\n")
	body := sb.String()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Tandem-Worker", "canned")
		_, _ = io.WriteString(w, body)
	}))
	b.Cleanup(s.Close)
	return s
}

// BenchmarkMaxRate measures the highest request rate the tool drives: a
// closed loop of streamed chat requests (64-word prompts, 16 output
// tokens) against the canned server and against a whole Tandem whose
// mocker workers are instant. The figure is what docs/benchmarks/bench.md
// quotes; the scenarios need tens of requests per second.
func BenchmarkMaxRate(b *testing.B) {
	targets := map[string]func(b *testing.B) string{
		"canned": func(b *testing.B) string { return cannedServer(b).URL },
		"tandem-instant": func(b *testing.B) string {
			url, stop, err := startTandem(context.Background(), tandemOpts{mode: "round-robin", workers: 2, instant: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(stop)
			return url
		},
	}
	for _, name := range []string{"canned", "tandem-instant"} {
		for _, c := range []int{16, 64} {
			b.Run(fmt.Sprintf("%s/c%d", name, c), func(b *testing.B) {
				url := targets[name](b)
				wl := &Synthetic{Endpoint: Chat, Input: FixedDist(64), Output: FixedDist(16), IgnoreEOS: true, Seed: 1}
				o := Options{Targets: []Target{{URL: url, Model: "tandem-mock"}}, Concurrency: c, Requests: max(b.N, 200), WorkerHeader: DefaultWorkerHeader}
				b.ResetTimer()
				res, err := Run(context.Background(), wl, o)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				errs := 0
				for _, r := range res.Records {
					if !r.OK() {
						errs++
					}
				}
				if errs > 0 {
					b.Fatalf("%d errors: %s", errs, res.Records[0].Error)
				}
				b.ReportMetric(float64(len(res.Records))/res.Elapsed.Seconds(), "req/s")
			})
		}
	}
}
