package serve

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/tokenizer"
)

// startBench starts a system whose engine is instant, so only Tandem's own
// cost is measured.
func startBench(b *testing.B, plane string, workers int) (*System, *tokenizer.Model, []engine.Engine) {
	return startBenchWith(b, plane, workers, false)
}

// perToken splits every Delta into one Delta per token, so the frontend
// writes and flushes one SSE chunk per token, as it does when the engine
// is slower than the HTTP writer (every real engine).
type perToken struct{ engine.Engine }

func (p perToken) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	s, err := p.Engine.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	return &splitStream{s: s}, nil
}

type splitStream struct {
	s    engine.Stream
	held engine.Delta
	left []engine.Token
}

func (s *splitStream) Recv() (engine.Delta, error) {
	if len(s.left) == 0 {
		d, err := s.s.Recv()
		if err != nil || len(d.Tokens) <= 1 {
			return d, err
		}
		s.held, s.left = d, d.Tokens
	}
	out := s.held
	out.Tokens = s.left[:1:1]
	s.left = s.left[1:]
	if len(s.left) > 0 {
		out.Finish = engine.FinishNone
	}
	return out, nil
}

func startBenchWith(b *testing.B, plane string, workers int, split bool) (*System, *tokenizer.Model, []engine.Engine) {
	b.Helper()
	model, err := tokenizer.Default()
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Workers = workers
	cfg.RequestPlane = plane
	var engines []engine.Engine
	sys, err := Start(cfg, model, func(i int) (engine.Engine, error) {
		e, err := newInstantEngine(model)
		engines = append(engines, e)
		if split && err == nil {
			e = perToken{e}
		}
		return e, err
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sys.Shutdown(context.Background()) })
	return sys, model, engines
}

var benchBody = []byte(`{"model":"tandem-mock","messages":[{"role":"user","content":"Tell me a short story about a robot who learns to paint."}],"max_tokens":16,"ignore_eos":true,"stream":true}`)

// ttftHTTP sends one streaming chat request and returns the time to the
// first content chunk, then drains the stream.
func ttftHTTP(c *http.Client, url string) (time.Duration, error) {
	d, _, err := streamBody(c, url, benchBody)
	return d, err
}

// streamHTTP is ttftHTTP that also counts the content chunks received.
func streamHTTP(c *http.Client, url string) (time.Duration, int, error) {
	return streamBody(c, url, benchBody)
}

// streamBody sends body (a streaming chat request) and returns the time to
// the first content chunk and the content chunks received.
func streamBody(c *http.Client, url string, body []byte) (time.Duration, int, error) {
	start := time.Now()
	resp, err := c.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return 0, 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	br := bufio.NewReader(resp.Body)
	var ttft time.Duration
	chunks := 0
	for {
		line, err := br.ReadSlice('\n')
		if bytes.Contains(line, []byte(`"content":"`)) && !bytes.Contains(line, []byte(`"role"`)) {
			chunks++
			if ttft == 0 {
				ttft = time.Since(start)
			}
		}
		if err != nil {
			break
		}
	}
	return ttft, chunks, nil
}

// ttftDirect is the baseline: the same request straight to the engine, the
// chat template and tokenization included as a worker would need them.
func ttftDirect(eng engine.Engine, model *tokenizer.Model) (time.Duration, error) {
	start := time.Now()
	prompt := model.Tokenizer.Encode("<|im_start|>user\nTell me a short story about a robot who learns to paint.<|im_end|>\n<|im_start|>assistant\n")
	s, err := eng.Generate(context.Background(), &engine.Request{Prompt: prompt, MaxTokens: 16, IgnoreEOS: true})
	if err != nil {
		return 0, err
	}
	if _, err := s.Recv(); err != nil {
		return 0, err
	}
	ttft := time.Since(start)
	for {
		d, err := s.Recv()
		if err != nil || d.Finish != engine.FinishNone {
			break
		}
	}
	return ttft, nil
}

func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1))]
}

// BenchmarkFrontendOverhead measures, at concurrency 1 and interleaved, the
// TTFT through the HTTP frontend and straight to the engine; the reported
// added-p50/added-p99 are the frontend's fixed cost (target ≤ 0.3 ms / 1 ms).
func BenchmarkFrontendOverhead(b *testing.B) {
	for _, plane := range []string{"inproc", "grpc"} {
		b.Run(plane, func(b *testing.B) {
			sys, model, engines := startBench(b, plane, 1)
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			for i := 0; i < 200; i++ { // warm up connections and pools
				if _, err := ttftHTTP(c, sys.URL()); err != nil {
					b.Fatal(err)
				}
				_, _ = ttftDirect(engines[0], model)
			}
			var front, direct []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f, err := ttftHTTP(c, sys.URL())
				if err != nil {
					b.Fatal(err)
				}
				d, err := ttftDirect(engines[0], model)
				if err != nil {
					b.Fatal(err)
				}
				front, direct = append(front, f), append(direct, d)
			}
			b.StopTimer()
			if len(front) < 20 {
				return
			}
			us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
			b.ReportMetric(us(pct(front, .5)), "frontend-p50-µs")
			b.ReportMetric(us(pct(direct, .5)), "direct-p50-µs")
			b.ReportMetric(us(pct(front, .5)-pct(direct, .5)), "added-p50-µs")
			b.ReportMetric(us(pct(front, .99)-pct(direct, .99)), "added-p99-µs")
		})
	}
}

// BenchmarkStreamingThroughput drives streamed chat requests (16 output
// tokens) from concurrent clients in the same process and reports req/s
// (target ≥ 5,000 on the 2-core machine). The client's own cost is included.
// The chunk-per-token variants force one SSE chunk and flush per token; the
// plain ones let the instant engine's tokens coalesce.
func BenchmarkStreamingThroughput(b *testing.B) {
	for _, tc := range []struct {
		conc  int
		split bool
	}{{16, false}, {64, false}, {16, true}, {64, true}} {
		name := fmt.Sprintf("c%d", tc.conc)
		if tc.split {
			name += "-chunk-per-token"
		}
		conc := tc.conc
		b.Run(name, func(b *testing.B) {
			sys, _, _ := startBenchWith(b, "inproc", 2, tc.split)
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}}
			var wg sync.WaitGroup
			work := make(chan struct{}, b.N)
			for i := 0; i < b.N; i++ {
				work <- struct{}{}
			}
			close(work)
			errs := make(chan error, conc)
			var chunks atomic.Int64
			b.ResetTimer()
			start := time.Now()
			for w := 0; w < conc; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range work {
						_, n, err := streamHTTP(c, sys.URL())
						if err != nil {
							errs <- err
							return
						}
						chunks.Add(int64(n))
					}
				}()
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
			b.ReportMetric(float64(b.N)/el.Seconds(), "req/s")
			// An instant engine outruns the HTTP writer, so tokens coalesce
			// into fewer chunks; report how many, to read req/s honestly.
			b.ReportMetric(float64(chunks.Load())/float64(b.N), "chunks/req")
		})
	}
}
