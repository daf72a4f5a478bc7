package serve

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/engine/upstream"
	"github.com/tandemllm/tandem/nodes/frontend"
	"github.com/tandemllm/tandem/nodes/worker"
	"github.com/tandemllm/tandem/tokenizer"
)

// vllmServer is a stand-in for a vLLM server with a NixlConnector:
// Tandem's vLLM-compatible mode playing both roles of vLLM's P/D protocol.
func vllmServer(t *testing.T, model *tokenizer.Model) *System {
	t.Helper()
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.Workers, cfg.VLLMPD.Enabled = "127.0.0.1:0", 1, true
	sys, err := Start(cfg, model, func(int) (engine.Engine, error) {
		mc := mocker.DefaultConfig()
		mc.Model, mc.EOS, mc.Vocabulary = model.Name, model.Tokenizer.EOS(), model.Tokenizer.Encode(mocker.DefaultText)
		mc.KVEvents.Enabled, mc.Speedup, mc.KVBytesPerToken = false, 100, 2048
		return mocker.New(mc)
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Shutdown(context.Background()) })
	return sys
}

// TestVLLMProtocolAcrossWorkers: workers that are vLLM servers (fleet
// workers fronting vLLM-compatible servers, record kv_transfer.protocol
// "vllm") are paired by vLLM's own protocol: the frontend's proxy runs the
// prefill leg on the prefill server and hands the kv_transfer_params it
// returns, across the request plane, to the decode leg on the server the
// router picked, which then holds the prompt's blocks. (It lives here, not
// in frontend, because its vLLM stand-ins are serve systems.)
func TestVLLMProtocolAcrossWorkers(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	reg := discovery.NewMem()
	fc := frontend.DefaultConfig()
	fc.HTTPAddr, fc.KV.Seed = "127.0.0.1:0", 1
	fe, err := frontend.Start(context.Background(), fc, model, frontend.Options{Registry: reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fe.Shutdown(context.Background()) })
	startUpstream := func(id, role, url string) *worker.Worker {
		e, err := upstream.New(context.Background(), upstream.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		cfg := worker.DefaultConfig()
		cfg.ID, cfg.DeregisterDelay, cfg.Role = id, 0, role
		w, err := worker.Start(context.Background(), cfg, e, model, worker.Options{Registry: reg, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
		return w
	}
	p, d := vllmServer(t, model), vllmServer(t, model)
	pw := startUpstream("p0", "prefill", p.URL())
	startUpstream("d0", "decode", d.URL())
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Equal(fe.Members(), []string{"d0", "p0"}) || fe.Board.IsActive(frontend.DiagNoPrefill, "fleet") {
		if time.Now().After(deadline) {
			t.Fatalf("members %v, %v", fe.Members(), fe.Board.Active())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := pw.Record().KVTransfer.Protocol; got != discovery.ProtocolVLLM {
		t.Fatalf("prefill record protocol %q", got)
	}
	resp, err := http.Get(fe.URL() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Prefill []struct {
			ID       string `json:"id"`
			Protocol string `json:"kv_protocol"`
		} `json:"prefill_workers"`
	}
	err = json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if err != nil || len(rep.Prefill) != 1 || rep.Prefill[0].ID+":"+rep.Prefill[0].Protocol != "p0:vllm" {
		t.Fatalf("/health prefill workers %+v (%v)", rep.Prefill, err)
	}
	ids := make([]int, 700)
	for i := range ids {
		ids[i] = 1000 + i*37%40000
	}
	b, _ := json.Marshal(map[string]any{"model": "tandem-mock", "prompt": ids, "max_tokens": 1, "ignore_eos": true})
	resp, err = http.Post(fe.URL()+"/v1/completions", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var c struct {
		Usage struct {
			Details struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &c) != nil {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if cached := c.Usage.Details.CachedTokens; cached < 699/16*16 {
		t.Fatalf("decode server cached %d of 700 prompt tokens: the prefill leg's KV did not reach it", cached)
	}
	resp, err = http.Get(fe.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `tandem_vllmpd_prefill_legs_total{result="ok"} 1`) {
		t.Fatalf("prefill legs:\n%s", body)
	}
}
