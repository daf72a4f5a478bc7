package vllmpd_test

import (
	"crypto/tls"
	"fmt"
	"path/filepath"

	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/authn"

	"github.com/tandemllm/tandem/disagg/vllmpd"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/engine/upstream"
	"github.com/tandemllm/tandem/nodes/serve"
	"github.com/tandemllm/tandem/tokenizer"
)

// TestLegBodies pins the two legs' bodies to what vLLM's proxy sends
// (wire-formats §3) and X-Request-Id to both legs.
func TestLegBodies(t *testing.T) {
	cases := []struct {
		name, body, path string
		wantDecodeParams string // "" = none
	}{
		{"completions, stream with options", `{"model":"m","prompt":[1,2,3],"stream":true,"stream_options":{"include_usage":true},"max_tokens":40,"min_tokens":5}`,
			"/v1/completions", `{"do_remote_prefill":true,"remote_engine_id":"p0"}`},
		{"chat, max_completion_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":40,"min_completion_tokens":2}`,
			"/v1/chat/completions", `{"do_remote_prefill":true,"remote_engine_id":"p0"}`},
		{"prefill without params", `{"model":"m","prompt":"x","max_tokens":3}`, "/v1/completions", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			got := map[string]map[string]json.RawMessage{}
			ids := map[string]string{}
			leg := func(role, answer string) *httptest.Server {
				return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					var m map[string]json.RawMessage
					_ = json.NewDecoder(r.Body).Decode(&m)
					mu.Lock()
					got[role], ids[role] = m, r.Header.Get("X-Request-Id")
					mu.Unlock()
					if r.URL.Path != tc.path {
						t.Errorf("%s leg path %s, want %s", role, r.URL.Path, tc.path)
					}
					_, _ = io.WriteString(w, answer)
				}))
			}
			pAnswer := `{"id":"x","choices":[]}`
			if tc.wantDecodeParams != "" {
				pAnswer = `{"id":"x","choices":[],"kv_transfer_params":` + tc.wantDecodeParams + `}`
			}
			p, d := leg("p", pAnswer), leg("d", "ok")
			defer p.Close()
			defer d.Close()
			resp, err := vllmpd.Forward(context.Background(), p.URL, d.URL, []byte(tc.body), vllmpd.Options{RequestID: "req-7"})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if ids["p"] != "req-7" || ids["d"] != "req-7" {
				t.Fatalf("X-Request-Id %v", ids)
			}
			pl := got["p"]
			var kp map[string]any
			_ = json.Unmarshal(pl["kv_transfer_params"], &kp)
			want := map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
				"remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
			if len(kp) != len(want) {
				t.Fatalf("prefill kv_transfer_params %v", kp)
			}
			for k, v := range want {
				if kv, ok := kp[k]; !ok || kv != v {
					t.Fatalf("prefill kv_transfer_params[%s] = %v, want %v", k, kv, v)
				}
			}
			for k, v := range map[string]string{"stream": "false", "max_tokens": "1", "max_completion_tokens": "1"} {
				if string(pl[k]) != v {
					t.Fatalf("prefill %s = %s, want %s", k, pl[k], v)
				}
			}
			for _, k := range []string{"stream_options", "min_tokens", "min_completion_tokens"} {
				if _, ok := pl[k]; ok {
					t.Fatalf("prefill leg kept %s", k)
				}
			}
			var orig map[string]json.RawMessage
			_ = json.Unmarshal([]byte(tc.body), &orig)
			dl := got["d"]
			for k, v := range orig {
				if string(dl[k]) != string(v) {
					t.Fatalf("decode %s = %s, want the client's %s", k, dl[k], v)
				}
			}
			if string(dl["kv_transfer_params"]) != tc.wantDecodeParams {
				t.Fatalf("decode kv_transfer_params %s, want %s", dl["kv_transfer_params"], tc.wantDecodeParams)
			}
		})
	}
}

func TestPrefillLegFailureIsAnError(t *testing.T) {
	p := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":{"message":"boom"}}`, http.StatusServiceUnavailable)
	}))
	defer p.Close()
	if _, err := vllmpd.Forward(context.Background(), p.URL, p.URL, []byte(`{"model":"m","prompt":"x"}`), vllmpd.Options{}); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("err %v", err)
	}
}

func TestParamsBlockIDs(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want int
	}{{`{"remote_block_ids":[1,2,3]}`, 3}, {`{"remote_block_ids":[[1,2],[3]]}`, 3}, {`{"remote_block_ids":null}`, 0}, {`{}`, 0}} {
		p, err := vllmpd.ParseParams([]byte(tc.raw))
		if err != nil {
			t.Fatal(err)
		}
		ids, err := p.BlockIDs()
		if err != nil || len(ids) != tc.want {
			t.Fatalf("%s: %v %v", tc.raw, ids, err)
		}
	}
}

const kvBytesPerToken = 2048 // real bytes moved and verified, small enough for -race

func start(t *testing.T, pd bool) *serve.System {
	t.Helper()
	return startWith(t, pd, authn.Files{})
}

// startWith is start with the worker's cluster identity (mTLS on the side
// channel and the transfer node).
func startWith(t *testing.T, pd bool, mtls authn.Files) *serve.System {
	t.Helper()
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	cfg := serve.DefaultConfig()
	cfg.HTTPAddr, cfg.Workers, cfg.VLLMPD.Enabled, cfg.VLLMPD.MTLS = "127.0.0.1:0", 1, pd, mtls
	sys, err := serve.Start(cfg, model, func(int) (engine.Engine, error) {
		mc := mocker.DefaultConfig()
		mc.Model, mc.EOS, mc.Vocabulary = model.Name, model.Tokenizer.EOS(), model.Tokenizer.Encode(mocker.DefaultText)
		mc.KVEvents.Enabled, mc.Instant, mc.KVBytesPerToken = false, true, kvBytesPerToken
		return mocker.New(mc)
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Shutdown(context.Background()) })
	return sys
}

type result struct {
	text        string
	prompt      int
	cached      int
	kvParams    json.RawMessage
	workerReqID string
}

// read collects a completion, streamed or not.
func read(t *testing.T, resp *http.Response) result {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	type usage struct {
		Prompt  int `json:"prompt_tokens"`
		Details struct {
			Cached int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	type body struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
		Usage    *usage          `json:"usage"`
		KVParams json.RawMessage `json:"kv_transfer_params"`
	}
	r := result{workerReqID: resp.Header.Get("X-Request-Id")}
	add := func(b body) {
		for _, c := range b.Choices {
			r.text += c.Text + c.Message.Content + c.Delta.Content
		}
		if b.Usage != nil {
			r.prompt, r.cached = b.Usage.Prompt, b.Usage.Details.Cached
		}
		if b.KVParams != nil {
			r.kvParams = b.KVParams
		}
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var b body
		if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
			t.Fatal(err)
		}
		add(b)
		return r
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var b body
		if err := json.Unmarshal([]byte(line), &b); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		add(b)
	}
	return r
}

func tokenPrompt(n, salt int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(1000 + (i*31+salt*7919)%50000)
	}
	return p
}

// TestForwardAgainstMockerVLLMMode: two vLLM-compatible servers (one
// worker each) play P and D; the decode leg's tokens equal an aggregated
// server's and its cached_tokens cover the prompt's whole blocks, which it
// can only have by pulling them from P.
func TestForwardAgainstMockerVLLMMode(t *testing.T) {
	prefill, decode, agg := start(t, true), start(t, true), start(t, false)
	cases := []struct {
		name string
		body map[string]any
	}{
		{"completions", map[string]any{"model": "tandem-mock", "prompt": tokenPrompt(1500, 1), "max_tokens": 12, "ignore_eos": true}},
		{"completions streamed", map[string]any{"model": "tandem-mock", "prompt": tokenPrompt(777, 2), "max_tokens": 9, "ignore_eos": true,
			"stream": true, "stream_options": map[string]any{"include_usage": true}}},
		{"chat streamed, max_completion_tokens", map[string]any{"model": "tandem-mock", "max_completion_tokens": 7, "ignore_eos": true,
			"messages": []map[string]string{{"role": "user", "content": strings.Repeat("tell me about disaggregated prefill ", 40)}},
			"stream":   true, "stream_options": map[string]any{"include_usage": true}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body, _ := json.Marshal(tc.body)
			path := "/v1/completions"
			if _, ok := tc.body["messages"]; ok {
				path = "/v1/chat/completions"
			}
			aresp, err := http.Post(agg.URL()+path, "application/json", strings.NewReader(string(body)))
			if err != nil {
				t.Fatal(err)
			}
			want := read(t, aresp)
			if want.cached != 0 {
				t.Fatalf("aggregated run had %d cached tokens", want.cached)
			}
			resp, err := vllmpd.Forward(context.Background(), prefill.URL(), decode.URL(), body, vllmpd.Options{RequestID: "pd-" + strings.ReplaceAll(tc.name, " ", "-")})
			if err != nil {
				t.Fatal(err)
			}
			got := read(t, resp)
			if got.text != want.text || got.text == "" {
				t.Fatalf("decode leg text %q, aggregated %q", got.text, want.text)
			}
			if got.workerReqID != "pd-"+strings.ReplaceAll(tc.name, " ", "-") {
				t.Fatalf("decode leg X-Request-Id %q", got.workerReqID)
			}
			if got.prompt != want.prompt {
				t.Fatalf("prompt tokens %d vs %d", got.prompt, want.prompt)
			}
			bs := decode.Workers[0].Info.BlockSize
			if full := (got.prompt - 1) / bs * bs; got.cached < full || full == 0 {
				t.Fatalf("decode leg cached %d of %d prompt tokens, want ≥ %d (pulled from P)", got.cached, got.prompt, full)
			}
		})
	}
}

// TestPrefillLegParams checks the mocker's prefill answer carries the §3
// fields, and a decode leg naming an unknown lease still succeeds
// (prefilling locally).
func TestPrefillLegParams(t *testing.T) {
	prefill, decode := start(t, true), start(t, true)
	prompt := tokenPrompt(100, 3)
	body, _ := json.Marshal(map[string]any{"model": "tandem-mock", "prompt": prompt, "max_tokens": 1, "max_completion_tokens": 1,
		"kv_transfer_params": map[string]any{"do_remote_decode": true}})
	req, _ := http.NewRequest(http.MethodPost, prefill.URL()+"/v1/completions", strings.NewReader(string(body)))
	req.Header.Set("X-Request-Id", "lease-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := read(t, resp)
	var kp map[string]json.RawMessage
	if err := json.Unmarshal(r.kvParams, &kp); err != nil {
		t.Fatalf("%v: %s", err, r.kvParams)
	}
	for _, k := range []string{"do_remote_prefill", "do_remote_decode", "remote_engine_id", "remote_request_id", "remote_block_ids",
		"remote_host", "remote_port", "tp_size", "remote_num_tokens", "remote_blocks_expiry_time"} {
		if _, ok := kp[k]; !ok {
			t.Fatalf("prefill answer lacks %s: %s", k, r.kvParams)
		}
	}
	p, _ := vllmpd.ParseParams(r.kvParams)
	ids, _ := p.BlockIDs()
	if !p.DoRemotePrefill || p.DoRemoteDecode || p.RemoteRequestID != "lease-1" || len(ids) != (len(prompt)-1)/16 || p.RemoteNumTokens != len(prompt) {
		t.Fatalf("params %s", r.kvParams)
	}
	// A stale lease: the decode worker prefills itself and still answers.
	stale := strings.Replace(string(r.kvParams), `"lease-1"`, `"gone"`, 1)
	dbody := `{"model":"tandem-mock","prompt":` + mustJSON(prompt) + `,"max_tokens":3,"ignore_eos":true,"kv_transfer_params":` + stale + `}`
	dresp, err := http.Post(decode.URL()+"/v1/completions", "application/json", strings.NewReader(dbody))
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, dresp); got.cached != 0 || got.text == "" {
		t.Fatalf("stale lease: cached %d text %q", got.cached, got.text)
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestRouterDrivesVLLMProtocol: Tandem's router in front of two
// vLLM-compatible servers reached as upstream engines: the decode worker
// is the router's pick, the Proxy runs the prefill leg on the prefill
// server and hands its kv_transfer_params to the decode leg. The decode
// server's output equals an aggregated server's, and its cached tokens
// cover the prompt's whole blocks, which it can only have pulled from the
// prefill server. A failing prefill server costs a fallback, not the
// request.
func TestRouterDrivesVLLMProtocol(t *testing.T) {
	prefill, decode, agg := start(t, true), start(t, true), start(t, false)
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	urls := []string{decode.URL(), prefill.URL()}
	cfg := serve.DefaultConfig()
	cfg.HTTPAddr, cfg.Workers, cfg.PDPrefillWorkers = "127.0.0.1:0", 1, 1
	front, err := serve.Start(cfg, model, func(i int) (engine.Engine, error) {
		return upstream.New(context.Background(), upstream.Config{URL: urls[i]})
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = front.Shutdown(context.Background()) })

	for _, stream := range []bool{false, true} {
		body, _ := json.Marshal(map[string]any{"model": "tandem-mock", "prompt": tokenPrompt(900, 5), "max_tokens": 10,
			"ignore_eos": true, "stream": stream, "stream_options": map[string]any{"include_usage": true}})
		if !stream {
			body, _ = json.Marshal(map[string]any{"model": "tandem-mock", "prompt": tokenPrompt(900, 5), "max_tokens": 10, "ignore_eos": true})
		}
		aresp, err := http.Post(agg.URL()+"/v1/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		want := read(t, aresp)
		resp, err := http.Post(front.URL()+"/v1/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		got := read(t, resp)
		if got.text != want.text || got.text == "" {
			t.Fatalf("stream=%v: through the router %q, aggregated %q", stream, got.text, want.text)
		}
		bs := decode.Workers[0].Info.BlockSize
		if full := (got.prompt - 1) / bs * bs; got.prompt != 900 || got.cached < full {
			t.Fatalf("stream=%v: decode server cached %d of %d prompt tokens, want ≥ %d", stream, got.cached, got.prompt, full)
		}
	}
	m := metricsText(t, front.URL())
	if !strings.Contains(m, `tandem_vllmpd_prefill_legs_total{result="ok"} 2`) {
		t.Fatalf("prefill legs:\n%s", grep(m, "tandem_vllmpd"))
	}

	// The prefill server goes away: the decode server prefills itself.
	if err := prefill.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"model": "tandem-mock", "prompt": tokenPrompt(600, 6), "max_tokens": 4, "ignore_eos": true})
	resp, err := http.Post(front.URL()+"/v1/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, resp); got.text == "" || got.cached != 0 {
		t.Fatalf("after the prefill server left: %+v", got)
	}
	if m := metricsText(t, front.URL()); !strings.Contains(m, `tandem_vllmpd_prefill_legs_total{result="failed"} 1`) {
		t.Fatalf("failed leg not counted:\n%s", grep(m, "tandem_vllmpd"))
	}
	// And the dead server is a diagnostic on /health, not only a counter.
	deadline := time.Now().Add(5 * time.Second)
	for !front.Board.IsActive(upstream.DiagUnavailable, "prefill-0") {
		if time.Now().After(deadline) {
			t.Fatalf("no %s for prefill-0: %v", upstream.DiagUnavailable, front.Board.Active())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func metricsText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestPullOverMTLS: with the cluster identity the decode worker pulls the
// prefilled blocks over mutual TLS, and a stranger's pull on the side
// channel, plain or without a certificate, is refused.
func TestPullOverMTLS(t *testing.T) {
	dir := t.TempDir()
	if _, err := authn.Init(dir, 0, 2, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	files := func(name string) authn.Files {
		return authn.Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
	}
	prefill, decode := startWith(t, true, files("worker-1")), startWith(t, true, files("worker-2"))
	prompt := tokenPrompt(100, 5)
	body, _ := json.Marshal(map[string]any{"model": "tandem-mock", "prompt": prompt, "max_tokens": 4, "ignore_eos": true})
	resp, err := vllmpd.Forward(context.Background(), prefill.URL(), decode.URL(), body, vllmpd.Options{RequestID: "mtls-1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, resp); got.cached < (len(prompt)-1)/16*16 {
		t.Fatalf("decode leg cached %d tokens: the pull over mTLS failed", got.cached)
	}
	// The prefill leg's params name the side channel.
	pbody, _ := json.Marshal(map[string]any{"model": "tandem-mock", "prompt": prompt, "max_tokens": 1,
		"kv_transfer_params": map[string]any{"do_remote_decode": true}})
	presp, err := http.Post(prefill.URL()+"/v1/completions", "application/json", strings.NewReader(string(pbody)))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := vllmpd.ParseParams(read(t, presp).kvParams)
	if p.RemoteHost == nil || p.RemotePort == nil {
		t.Fatal("no side channel in the params")
	}
	side := fmt.Sprintf("%s:%d", *p.RemoteHost, *p.RemotePort)
	pull := `{"remote_request_id":"` + p.RemoteRequestID + `","from":0,"dst_id":"x","dst_addr":"127.0.0.1:9"}`
	for name, c := range map[string]*http.Client{
		"plain":          {Timeout: 3 * time.Second},
		"no certificate": {Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}},
	} {
		scheme := "https://"
		if name == "plain" {
			scheme = "http://"
		}
		r, err := c.Post(scheme+side+"/v1/kv/pull", "application/json", strings.NewReader(pull))
		if err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK || r.StatusCode == http.StatusBadGateway || r.StatusCode == http.StatusNotFound {
				t.Fatalf("%s: the side channel answered a stranger's pull: %d", name, r.StatusCode)
			}
		}
	}
}
