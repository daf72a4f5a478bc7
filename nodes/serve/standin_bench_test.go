package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/upstream"
	"github.com/tandemllm/tandem/engine/upstream/standin"
	"github.com/tandemllm/tandem/tokenizer"
)

// BenchmarkUpstreamTTFT: what Tandem in front of each engine's stand-in
// adds to the time to first token. Each iteration sends one streamed
// request straight to the stand-in in its own API (the baseline) and one
// through `tandem serve --engine upstream` (/v1/completions, the same
// prompt), alternating, so both see the same machine; the stand-ins
// compute nothing (instant mockers, llama-server look-alike with zero
// per-token time), so the difference is Tandem's: HTTP in, templating and
// tokenizing, routing, the upstream request, the first chunk back out.
// It reports p50 TTFT direct and via Tandem and their difference (the
// issue's bar: ≤ 0.3 ms).
//
//	go test ./nodes/serve -run '^$' -bench BenchmarkUpstreamTTFT -benchtime 400x
func BenchmarkUpstreamTTFT(b *testing.B) {
	model, err := tokenizer.Default()
	if err != nil {
		b.Fatal(err)
	}
	prompt := strings.Repeat("The clockmaker fixed every clock in the town. ", 8)
	ids := model.Tokenizer.Encode(prompt)
	quiet := slog.New(slog.DiscardHandler)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	for _, api := range []string{upstream.APIVLLM, upstream.APISGLang, upstream.APILlamaCpp, upstream.APIOpenAI} {
		b.Run(api, func(b *testing.B) {
			mc := mockerConfig(model)
			mc.Instant, mc.Model = true, "m"
			var url, path string
			var direct []byte
			idsJSON, _ := json.Marshal(ids)
			switch api {
			case upstream.APIVLLM, upstream.APIOpenAI:
				srv, err := standin.Start(standin.Options{Model: "m", Mocker: mc, ReturnTokenIDs: api == upstream.APIVLLM, PromptTokensDetails: true, Codec: model.Tokenizer})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { srv.Close() })
				url, path = srv.URL(), "/v1/completions"
				p := string(idsJSON)
				if api == upstream.APIOpenAI {
					q, _ := json.Marshal(prompt)
					p = string(q)
				}
				direct = fmt.Appendf(nil, `{"model":"m","prompt":%s,"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`, p)
			case upstream.APISGLang:
				srv, err := standin.StartSGLang(standin.SGLangOptions{Model: "m", Mocker: mc, Codec: model.Tokenizer})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { srv.Close() })
				url, path = srv.URL(), "/generate"
				direct = fmt.Appendf(nil, `{"input_ids":%s,"sampling_params":{"max_new_tokens":4,"temperature":0},"stream":true}`, idsJSON)
			case upstream.APILlamaCpp:
				srv, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "m", Slots: 8, NCtx: 4096})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { srv.Close() })
				url, path = srv.URL(), "/completion"
				direct = fmt.Appendf(nil, `{"prompt":%s,"n_predict":4,"stream":true,"cache_prompt":true,"return_tokens":true}`, idsJSON)
			}
			cfg := DefaultConfig()
			cfg.HTTPAddr, cfg.Workers, cfg.RouterMode = "127.0.0.1:0", 1, "kv-approx"
			sys, err := Start(cfg, model, func(int) (engine.Engine, error) {
				return upstream.New(context.Background(), upstream.Config{URL: url, API: api, Codec: model.Tokenizer, HealthInterval: -1, MetricsInterval: -1, Logger: quiet})
			}, quiet)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = sys.Shutdown(context.Background()) })
			q, _ := json.Marshal(prompt)
			via := fmt.Appendf(nil, `{"model":"m","prompt":%s,"max_tokens":4,"stream":true}`, q)
			// Warm both paths (connections, caches).
			for range 20 {
				standinTTFT(b, client, url+path, direct)
				standinTTFT(b, client, sys.URL()+"/v1/completions", via)
			}
			d, v := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				d = append(d, standinTTFT(b, client, url+path, direct))
				v = append(v, standinTTFT(b, client, sys.URL()+"/v1/completions", via))
			}
			b.StopTimer()
			pd, pv := standinP50(d), standinP50(v)
			b.ReportMetric(float64(pd.Microseconds())/1000, "direct_p50_ms")
			b.ReportMetric(float64(pv.Microseconds())/1000, "tandem_p50_ms")
			b.ReportMetric(float64((pv-pd).Microseconds())/1000, "added_p50_ms")
		})
	}
}

// ttft sends one streamed request and returns the time to its first SSE
// data event that carries output (the body is then read to its end).
func standinTTFT(b *testing.B, c *http.Client, url string, body []byte) time.Duration {
	start := time.Now()
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("%s: status %d", url, resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	var first time.Duration
	for {
		line, err := r.ReadBytes('\n')
		if first == 0 && bytes.HasPrefix(line, []byte("data:")) && !bytes.Contains(line, []byte("[DONE]")) &&
			!bytes.Contains(line, []byte(`"choices":[]`)) {
			first = time.Since(start)
		}
		if err != nil {
			break
		}
	}
	if first == 0 {
		b.Fatalf("%s: no data event", url)
	}
	return first
}

func standinP50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
