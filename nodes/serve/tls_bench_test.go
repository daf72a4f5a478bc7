package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/httpapi"
	"github.com/tandemllm/tandem/tokenizer"
)

// BenchmarkSecurityCost measures what the protections add to TTFT: HTTPS
// with an API key on the frontend against plain HTTP (in-process workers),
// and mutual TLS on the gRPC request plane against plaintext gRPC. The
// four systems run side by side and every client sends its requests to
// them in turn, so each pair is measured in the same run under the same
// load; connections are reused (keep-alive, one HTTP/2 connection per
// worker), as in steady serving. Each b.N is one request per system per
// client.
func BenchmarkSecurityCost(b *testing.B) {
	dir := b.TempDir()
	if _, err := authn.Init(dir, 1, 1, []string{"127.0.0.1"}, time.Hour); err != nil {
		b.Fatal(err)
	}
	keyFile := filepath.Join(dir, "keys")
	const key = "bench-api-key-0123456789"
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	keys, err := httpapi.LoadAPIKeys(keyFile)
	if err != nil {
		b.Fatal(err)
	}
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	pair := func(name string) authn.Files {
		return authn.Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
	}
	model, err := tokenizer.Default()
	if err != nil {
		b.Fatal(err)
	}
	type variant struct {
		name     string
		plane    string
		https    bool
		mtls     bool
		baseline int // index of the variant it is compared with; -1: none
	}
	variants := []variant{
		{"http", "inproc", false, false, -1},
		{"https+key", "inproc", true, false, 0},
		{"grpc", "grpc", false, false, -1},
		{"grpc-mtls", "grpc", false, true, 2},
	}
	for _, conc := range []int{1, 32} {
		b.Run(fmt.Sprintf("c%d", conc), func(b *testing.B) {
			urls := make([]string, len(variants))
			clients := make([]*http.Client, len(variants))
			for i, v := range variants {
				cfg := DefaultConfig()
				cfg.HTTPAddr, cfg.Workers, cfg.RequestPlane = "127.0.0.1:0", 1, v.plane
				tr := &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}
				var rt http.RoundTripper = tr
				if v.https {
					cfg.TLS = httpapi.TLSFiles{Cert: filepath.Join(dir, "frontend-1.crt"), Key: filepath.Join(dir, "frontend-1.key")}
					cfg.Frontend.APIKeys = keys
					tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
					rt = bearer{tr, key}
				}
				if v.mtls {
					cfg.MTLS, cfg.MTLSWorker = pair("frontend-1"), pair("worker-1")
				}
				sys, err := Start(cfg, model, func(int) (engine.Engine, error) { return newInstantEngine(model) }, slog.New(slog.DiscardHandler))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = sys.Shutdown(context.Background()) })
				urls[i], clients[i] = sys.URL(), &http.Client{Transport: rt}
			}
			var mu sync.Mutex
			ttft := make([][]time.Duration, len(variants))
			run := func(n int, keep bool) {
				var wg sync.WaitGroup
				errs := make(chan error, conc)
				for w := 0; w < conc; w++ {
					wg.Go(func() {
						local := make([][]time.Duration, len(variants))
						for j := 0; j < n; j++ {
							for i := range variants {
								// Rotate the order so no variant always goes first.
								k := (i + j + w) % len(variants)
								d, _, err := streamBody(clients[k], urls[k], benchBody)
								if err != nil {
									errs <- fmt.Errorf("%s: %w", variants[k].name, err)
									return
								}
								local[k] = append(local[k], d)
							}
						}
						if keep {
							mu.Lock()
							for i := range local {
								ttft[i] = append(ttft[i], local[i]...)
							}
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
			}
			run(max(200/conc, 10), false) // warm up: connections, handshakes, pools
			b.ResetTimer()
			run(b.N, true)
			b.StopTimer()
			if len(ttft[0]) < 20 {
				return
			}
			us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
			for i, v := range variants {
				b.ReportMetric(us(pct(ttft[i], .5)), v.name+"-p50-µs")
				if v.baseline >= 0 {
					base := ttft[v.baseline]
					b.ReportMetric(us(pct(ttft[i], .5)-pct(base, .5)), v.name+"-added-p50-µs")
					b.ReportMetric(us(pct(ttft[i], .99)-pct(base, .99)), v.name+"-added-p99-µs")
				}
			}
		})
	}
}

type bearer struct {
	http.RoundTripper
	key string
}

func (t bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.key)
	return t.RoundTripper.RoundTrip(r)
}
