package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
)

// BenchmarkRequestPath measures the whole frontend path (HTTP, decoding,
// tokenizing, admission, dispatch: routing and the router's callbacks,
// SSE) around an instant engine, in the process, so that one commit can
// be compared with another in one sitting:
//
//   - added: at concurrency 1, the time to the first SSE chunk of a
//     streamed completion minus the time to the first Delta straight from
//     the same engine, interleaved; added-p50/p99 are the frontend's cost.
//   - stream-cN: N clients each sending streamed chat requests (16 output
//     tokens) back to back; req/s, the client's own cost included.
func BenchmarkRequestPath(b *testing.B) {
	out := append(toks("abcdefghijklmno"), tokEnd)
	newEngine := func() *enginetest.Scripted {
		return &enginetest.Scripted{Name: "m", Output: out, EOS: []engine.Token{tokEnd}}
	}
	b.Run("added", func(b *testing.B) {
		eng := newEngine()
		f := newFixture(&testing.T{}, 4096, map[string]engine.Generator{"w0": eng})
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		prompt := toks("hello")
		body := `{"model":"m","stream":true,"prompt":"hello","max_tokens":16}`
		direct := func() time.Duration {
			start := time.Now()
			st, err := eng.Generate(context.Background(), &engine.Request{ID: "d", Model: "m", Prompt: prompt, MaxTokens: 16})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := st.Recv(); err != nil {
				b.Fatal(err)
			}
			el := time.Since(start)
			for {
				if d, err := st.Recv(); err != nil || d.Finish != engine.FinishNone {
					break
				}
			}
			return el
		}
		for range 200 { // connections and pools warm
			if _, err := firstChunk(c, f.url, body); err != nil {
				b.Fatal(err)
			}
			direct()
		}
		var front, straight []time.Duration
		for b.Loop() {
			d, err := firstChunk(c, f.url, body)
			if err != nil {
				b.Fatal(err)
			}
			front, straight = append(front, d), append(straight, direct())
		}
		if len(front) < 20 {
			return
		}
		us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
		b.ReportMetric(us(pctl(front, .5)-pctl(straight, .5)), "added-p50-µs")
		b.ReportMetric(us(pctl(front, .99)-pctl(straight, .99)), "added-p99-µs")
	})
	for _, conc := range []int{16} {
		b.Run(fmt.Sprintf("stream-c%d", conc), func(b *testing.B) {
			f := newFixture(&testing.T{}, 4096, map[string]engine.Generator{"w0": newEngine(), "w1": newEngine()})
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}}
			body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}],"max_tokens":16}`
			work := make(chan struct{}, b.N)
			for range b.N {
				work <- struct{}{}
			}
			close(work)
			errs := make(chan error, conc)
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range conc {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range work {
						if err := streamOnce(c, f.url+"/v1/chat/completions", body); err != nil {
							errs <- err
							return
						}
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
		})
	}
}

// firstChunk posts a streamed completion and returns the time to its first
// data event, then reads the rest.
func firstChunk(c *http.Client, url, body string) (time.Duration, error) {
	start := time.Now()
	resp, err := c.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return 0, err
		}
		if strings.HasPrefix(line, "data: {") {
			break
		}
	}
	el := time.Since(start)
	_, err = io.Copy(io.Discard, r)
	return el, err
}

func streamOnce(c *http.Client, url, body string) error {
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
	}
	return nil
}

func pctl(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1))]
}
