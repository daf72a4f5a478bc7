package doctor

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tandemllm/tandem/openai"
)

// probeWords is the probe prompt's vocabulary: common English words, one
// token each in most tokenizers, so the prompt's length in tokens is close
// to its length in words.
var probeWords = strings.Fields(`time year people way day man thing woman life child world school state family
student group country problem hand part place case week company system program question work government number
night point home water room mother area money story fact month lot right study book eye job word business issue
side kind head house service friend father power hour game line end member law car city community name president
team minute idea kid body information back parent face others level office door health person art war history
party result change morning reason research girl guy moment air teacher force education`)

// Bounds on one probe response: a streamed one-token completion is a few
// KiB; an SSE line is a chunk of JSON.
const (
	maxProbeBytes = 4 << 20
	maxSSELine    = 1 << 20
)

// probeResult is what one probe request measured.
type probeResult struct {
	TTFT           time.Duration // request sent → first chunk with a choice
	Worker         string        // X-Tandem-Worker
	PromptTokens   int
	CachedTokens   int
	CachedReported bool
}

// probePrompt is a synthetic prompt, never user data: a random nonce
// first (so no earlier run's blocks match it) then words drawn from
// probeWords by random bytes. The two sends of one run use the same
// prompt.
func probePrompt(words int) (string, error) {
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return "", fmt.Errorf("probe prompt: %w", err)
	}
	pick := make([]byte, words)
	if _, err := rand.Read(pick); err != nil {
		return "", fmt.Errorf("probe prompt: %w", err)
	}
	var b strings.Builder
	b.WriteString(hex.EncodeToString(nonce[:]))
	b.WriteString(" synthetic tandem doctor probe, not user data:")
	for _, p := range pick {
		b.WriteByte(' ')
		b.WriteString(probeWords[int(p)%len(probeWords)])
	}
	return b.String(), nil
}

// send posts one streaming completion with usage and measures its TTFT
// from the client's side.
func (d *run) send(c *http.Client, model, prompt string) (probeResult, error) {
	var res probeResult
	body, err := json.Marshal(map[string]any{
		"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0,
		"stream": true, "stream_options": map[string]bool{"include_usage": true},
	})
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.cfg.FrontendURL+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return res, err
	}
	req.Header.Set("Content-Type", "application/json")
	if d.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+d.cfg.APIKey)
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	res.Worker = resp.Header.Get("X-Tandem-Worker")
	lr := io.LimitReader(resp.Body, maxProbeBytes)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(lr, 2048))
		return res, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, bytes.TrimSpace(b))
	}
	br, long := bufio.NewReaderSize(lr, 64<<10), []byte(nil)
	first, usage := false, false
	for {
		line, rerr := openai.ReadSSELine(br, &long, maxSSELine)
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return res, fmt.Errorf("read stream: %w", rerr)
		}
		data, ok := openai.SSEData(line)
		if !ok {
			if rerr != nil {
				break
			}
			continue
		}
		if bytes.Equal(data, []byte("[DONE]")) {
			break
		}
		var ch struct {
			Choices []json.RawMessage `json:"choices"`
			Usage   *openai.Usage     `json:"usage"`
			Error   *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(data, &ch); err != nil {
			return res, fmt.Errorf("SSE chunk %.200q: %w", data, err)
		}
		if ch.Error != nil {
			return res, fmt.Errorf("stream error: %.300s", ch.Error.Message)
		}
		if !first && len(ch.Choices) > 0 {
			first, res.TTFT = true, time.Since(start)
		}
		if ch.Usage != nil {
			usage = true
			res.PromptTokens = ch.Usage.PromptTokens
			res.CachedTokens = ch.Usage.Details.CachedTokens
			res.CachedReported = ch.Usage.Details.Reported()
		}
		if rerr != nil {
			break
		}
	}
	switch {
	case !first:
		return res, fmt.Errorf("the stream carried no token")
	case !usage:
		return res, fmt.Errorf("the stream carried no usage chunk despite stream_options.include_usage")
	}
	return res, nil
}

// ttftSnap is one moment's TTFT histograms: the frontend's for the
// probe's model, and each live worker's engine's.
type ttftSnap struct {
	fe      hist
	feErr   error
	workers map[string]hist // worker id → its engine's vllm:time_to_first_token_seconds
}

type hist struct {
	n   uint64
	sum float64
}

func (d *run) snapshot(model string) ttftSnap {
	s := ttftSnap{workers: map[string]hist{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Go(func() {
		b, code, err := d.get(d.fe, d.cfg.FrontendURL+"/metrics", maxMetricsBytes, d.cfg.APIKey)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("HTTP %d", code)
		}
		var f families
		if err == nil {
			f, err = parseMetrics(b)
		}
		if err != nil {
			s.feErr = err
			return
		}
		n, sum := f.histogram("tandem_frontend_time_to_first_token_seconds", map[string]string{"model": model})
		s.fe = hist{n, sum}
	})
	scheme := "http://"
	if d.cfg.WorkerTLS != nil {
		scheme = "https://"
	}
	for _, r := range d.records {
		if r.MetricsAddr == "" || !d.live[r.ID] || r.Model != model {
			continue
		}
		wg.Go(func() {
			b, code, err := d.get(d.wk, scheme+r.MetricsAddr+"/metrics", maxMetricsBytes, "")
			if err != nil || code != http.StatusOK {
				return
			}
			f, err := parseMetrics(b)
			if err != nil || f["vllm:time_to_first_token_seconds"] == nil {
				return
			}
			n, sum := f.histogram("vllm:time_to_first_token_seconds", nil)
			mu.Lock()
			s.workers[r.ID] = hist{n, sum}
			mu.Unlock()
		})
	}
	wg.Wait()
	return s
}

// probeModel is --probe-model, else the first model with a live worker.
func (d *run) probeModel() string {
	if d.cfg.ProbeModel != "" {
		return d.cfg.ProbeModel
	}
	if d.health != nil {
		for _, m := range d.health.Models {
			if m.Workers > 0 {
				return m.Name
			}
		}
	}
	return ""
}

// blockSize is the block size of the worker's record, else of the
// model's records, else vLLM's default of 16.
func (d *run) blockSize(model, worker string) int {
	bs := 0
	for _, r := range d.records {
		if r.ID == worker && r.KVLayout.BlockSize > 0 {
			return r.KVLayout.BlockSize
		}
		if r.Model == model && r.KVLayout.BlockSize > 0 && bs == 0 {
			bs = r.KVLayout.BlockSize
		}
	}
	if bs == 0 {
		bs = 16
	}
	return bs
}

// probe sends one synthetic prompt twice and checks the second found the
// first's blocks cached (probe.prefix_cache) and, from the TTFT
// histograms read around each send, how much TTFT the frontend adds on
// top of the engine's own (frontend.ttft_added).
func (d *run) probe() {
	if !d.cfg.Probe {
		return
	}
	model := d.probeModel()
	if model == "" {
		d.add(Check{ID: IDProbeCache, Verdict: Fail, Summary: "no probe sent: the frontend serves no model with a live worker",
			Fix: "start a worker, or name the model with --probe-model"})
		return
	}
	prompt, err := probePrompt(d.cfg.ProbeWords)
	if err != nil {
		d.add(Check{ID: IDProbeCache, Subject: model, Verdict: Fail, Summary: "no probe sent", Evidence: []string{err.Error()}})
		return
	}
	// A client of its own: the probe's response headers come only after
	// the first token, so the metrics client's header timeout is too
	// short for a long prompt's prefill.
	t := transport(d.cfg.FrontendTLS)
	t.ResponseHeaderTimeout = d.cfg.ProbeTimeout
	pc := &http.Client{Timeout: d.cfg.ProbeTimeout, Transport: t}
	defer t.CloseIdleConnections()
	snaps := []ttftSnap{d.snapshot(model)}
	var res [2]probeResult
	for i := range res {
		if res[i], err = d.send(pc, model, prompt); err != nil {
			fix := "check that the frontend serves " + model + " (--probe-model names another)"
			if strings.Contains(err.Error(), "HTTP 401") || strings.Contains(err.Error(), "HTTP 403") {
				fix = "pass one of the deployment's keys: --api-key KEY or $OPENAI_API_KEY"
			}
			d.add(Check{ID: IDProbeCache, Subject: model, Verdict: Fail, Summary: fmt.Sprintf("probe request %d of 2 failed", i+1),
				Evidence: []string{err.Error()}, Fix: fix})
			return
		}
		snaps = append(snaps, d.snapshot(model))
	}
	d.probeCache(model, res)
	d.ttftAdded(model, res, snaps)
}

func (d *run) probeCache(model string, res [2]probeResult) {
	a, b := res[0], res[1]
	bs := d.blockSize(model, b.Worker)
	whole := b.PromptTokens / bs * bs
	// "Most" of the whole blocks: an engine may recompute the last whole
	// block (vLLM does when the prompt ends on a block boundary, to have
	// logits to sample from) and a router may split one block differently;
	// three quarters leaves room for both on any prompt over a few blocks.
	need := whole * 3 / 4
	c := Check{ID: IDProbeCache, Subject: model, Evidence: []string{
		fmt.Sprintf("synthetic %d-token prompt (random words, not user data), %d tokens in whole blocks of %d", b.PromptTokens, whole, bs),
		fmt.Sprintf("send 1: %d cached, TTFT %v, worker %s", a.CachedTokens, a.TTFT.Round(time.Microsecond), or(a.Worker, "?")),
		fmt.Sprintf("send 2: %d cached, TTFT %v, worker %s", b.CachedTokens, b.TTFT.Round(time.Microsecond), or(b.Worker, "?")),
	}}
	switch {
	case !b.CachedReported:
		c.Verdict, c.Summary = Fail, "the response's usage has no prompt_tokens_details.cached_tokens: prefix caching cannot be seen"
		c.Fix = "a vLLM worker needs --enable-prompt-tokens-details (diagnostic upstream_no_cached_tokens)"
	case b.CachedTokens < need:
		c.Verdict = Fail
		c.Summary = fmt.Sprintf("the re-sent prompt found %d of its %d whole-block tokens cached (want >= %d): prefix reuse does not work", b.CachedTokens, whole, need)
		why := "the same worker served both"
		if a.Worker != b.Worker {
			why = "the router sent the re-send to another worker"
		}
		c.Evidence = append(c.Evidence, why)
		c.Fix = "route by KV: --router-mode kv on the frontend, with each worker's KV events reaching it (the kv_events check; `tandem worker --kv-events on`, vLLM --kv-events-config); enable the engine's prefix cache (vLLM --enable-prefix-caching); and give router and engines one block size (--router-block-size must divide every --block-size: the kv.block_size check)"
	case b.TTFT >= a.TTFT:
		c.Verdict = Warn
		c.Summary = fmt.Sprintf("%d tokens cached, but the re-send's TTFT %v is not lower than the first's %v", b.CachedTokens, b.TTFT.Round(time.Microsecond), a.TTFT.Round(time.Microsecond))
		c.Fix = "the cache hit saved no time: the prompt's prefill is too short to show (raise --probe-words), or the TTFT is spent elsewhere (queueing: frontend.ttft_added and the frontend's tandem_frontend_queued_requests; a busy worker)"
	default:
		c.Verdict = OK
		c.Summary = fmt.Sprintf("%d of %d prompt tokens cached on the re-send; TTFT %v → %v", b.CachedTokens, b.PromptTokens, a.TTFT.Round(time.Microsecond), b.TTFT.Round(time.Microsecond))
	}
	d.add(c)
}

// ttftAdded compares, for each probe send, the frontend's TTFT (its
// histogram's growth) with the serving worker's engine TTFT (vLLM's
// vllm:time_to_first_token_seconds, which Tandem's engines export too):
// the difference is the frontend's own work (template, tokenize, route,
// admission queue) and the request plane's hop.
func (d *run) ttftAdded(model string, res [2]probeResult, snaps []ttftSnap) {
	c := Check{ID: IDFrontendTTFT, Subject: model}
	if d.cfg.Registry == nil || !d.readRec {
		c.Verdict, c.Summary = OK, "not measured: the workers' TTFT needs the discovery records (pass the deployment's --discovery flags)"
		d.add(c)
		return
	}
	best := math.Inf(1)
	for i, r := range res {
		before, after := snaps[i], snaps[i+1]
		if before.feErr != nil || after.feErr != nil {
			c.Verdict, c.Summary = Warn, "not measured: the frontend's /metrics cannot be read"
			c.Evidence = append(c.Evidence, fmt.Sprint(before.feErr, after.feErr))
			c.Fix = "see the frontend.metrics check"
			d.add(c)
			return
		}
		wb, okb := before.workers[r.Worker]
		wa, oka := after.workers[r.Worker]
		if !okb || !oka {
			c.Verdict, c.Summary = Warn, "not measured: worker "+or(r.Worker, "?")+"'s /metrics has no vllm:time_to_first_token_seconds"
			c.Fix = "start the worker with --metrics-addr (a vLLM server behind `tandem worker --upstream` exports it itself); with --mtls-* pass a monitor certificate"
			d.add(c)
			return
		}
		fn, fs := after.fe.n-before.fe.n, after.fe.sum-before.fe.sum
		wn, ws := wa.n-wb.n, wa.sum-wb.sum
		if fn == 0 || wn == 0 || after.fe.n < before.fe.n || wa.n < wb.n {
			c.Verdict, c.Summary = Warn, "not measured: the TTFT histograms did not count the probe (a restarted process?)"
			c.Evidence = append(c.Evidence, fmt.Sprintf("send %d: frontend +%d, worker %s +%d first tokens", i+1, int64(fn), r.Worker, int64(wn)))
			d.add(c)
			return
		}
		fe, wk := fs/float64(fn), ws/float64(wn)
		added := fe - wk
		note := ""
		if fn != 1 || wn != 1 {
			// Other traffic landed in the window: its means, not the
			// probe's own figures.
			note = fmt.Sprintf(" (means: %d frontend and %d worker first tokens in the window)", fn, wn)
		}
		c.Evidence = append(c.Evidence, fmt.Sprintf("send %d: frontend TTFT %v, worker %s engine TTFT %v, added %v; client saw %v%s", i+1,
			secs(fe), r.Worker, secs(wk), secs(added), r.TTFT.Round(time.Microsecond), note))
		best = min(best, added)
	}
	c.Verdict = OK
	c.Summary = fmt.Sprintf("the frontend adds %v to the engine's TTFT (warn over %v)", secs(best), d.cfg.MaxFrontendTTFT)
	if secs(best) > d.cfg.MaxFrontendTTFT {
		c.Verdict = Warn
		c.Summary = fmt.Sprintf("the frontend adds %v to the engine's TTFT (over %v)", secs(best), d.cfg.MaxFrontendTTFT)
		c.Fix = "look for queueing in the frontend (tandem_frontend_queued_requests; raise --max-inflight or add workers), a slow network between frontend and workers (put them on one network), or a CPU-starved frontend (its tokenize and template run per request: give it cores or add replicas)"
	}
	d.add(c)
}

func secs(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond)
}
