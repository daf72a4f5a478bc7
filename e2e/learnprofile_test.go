package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tandemllm/tandem/control/planner"
	"github.com/tandemllm/tandem/control/planner/sim"
	"github.com/tandemllm/tandem/engine/mocker"
)

// TestServeLearnProfile serves one mocker worker with the qwen3-0.6b
// timing (at --speedup 0.5: twice as slow, so a late timer
// or a starved scheduler on a loaded box weighs half as much once scaled
// back) and --learn-profile, sends a small mixed load of
// lone prompts (some half cached) and batches of decodes over HTTP, stops
// it, and checks the written profile against the timing model within 30% +
// 3 ms, as bench's TestProfileMatchesMockerTiming does. The base profile
// is the timing model's tripled, so a cell that was not learned fails.
// The in-process planner runs on the learned profile (pinned to one worker).
func TestServeLearnProfile(t *testing.T) {
	if secure.on {
		t.Skip("plain HTTP test")
	}
	const capacity, budget = 16384, 2048
	tm := mocker.Qwen3_0_6BTiming()
	spec := sim.WorkerSpec{Timing: tm, KVCapacityTokens: capacity, MaxNumSeqs: 256, MaxNumBatchedTokens: budget}
	base := spec.Profile()
	for _, g := range [][][]float64{base.Prefill.TTFTMs, base.Decode.ITLMs} {
		for _, r := range g {
			for j := range r {
				r[j] *= 3
			}
		}
	}
	dir := t.TempDir()
	baseFile, out := filepath.Join(dir, "base.json"), filepath.Join(dir, "learned.json")
	if err := base.WriteFile(baseFile); err != nil {
		t.Fatal(err)
	}
	p := startTandem(t, fmt.Sprintf("serve --http-addr 127.0.0.1:0 --workers 1 --timing qwen3-0.6b --speedup 0.5 "+
		"--kv-capacity-tokens %d --max-num-batched-tokens %d --learn-profile %s --learn-profile-base %s --learn-profile-interval 1s "+
		"--autoscale --pool agg=aggregated:1:1 --interval 500ms --planner-listen 127.0.0.1:0",
		capacity, budget, out, baseFile))

	rng := rand.New(rand.NewPCG(19, 19))
	fresh := func(n int) []int {
		ids := make([]int, n)
		for i := range ids {
			ids[i] = 1000 + rng.IntN(29000)
		}
		return ids
	}
	send := func(ids []int, maxTokens int) {
		b, _ := json.Marshal(map[string]any{"model": "tandem-mock", "prompt": ids, "max_tokens": maxTokens, "ignore_eos": true})
		c := http.Client{Timeout: 60 * time.Second}
		resp, err := c.Post(p.url+"/v1/completions", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Error(err)
			return
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("status %d: %s", resp.StatusCode, body)
		}
	}
	// Lone prompts: one step each (they fit the budget), the half-cached
	// ones after their first half was sent alone.
	isls := []int{128, 512, 2048}
	for range 3 {
		for _, isl := range isls {
			send(fresh(isl), 1)
			ids := fresh(isl)
			send(ids[:isl/2], 1)
			send(ids, 1)
		}
	}
	// Decodes: c sequences at once, contexts 501..532 (the 512 column).
	concs := []int{1, 4, 8}
	for _, c := range concs {
		var wg sync.WaitGroup
		for range c {
			ids := fresh(500)
			wg.Add(1)
			go func() { defer wg.Done(); send(ids, 32) }()
		}
		wg.Wait()
	}
	if t.Failed() {
		t.FailNow()
	}
	// SIGTERM: serve drains and writes the profile a last time.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("serve exited: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not exit within 60s of SIGTERM")
	}
	got, err := planner.LoadProfile(out)
	if err != nil {
		t.Fatal(err)
	}
	near := func(what string, got, want float64) {
		t.Helper()
		t.Logf("%s: learned %.2f ms, timing model %.2f ms", what, got, want)
		if math.Abs(got-want) > 0.3*want+3 {
			t.Errorf("%s: learned %.1f ms, timing model %.1f ms", what, got, want)
		}
	}
	for _, isl := range isls {
		for _, cf := range []float64{0, 0.5} {
			want := tm.PrefillMs(isl - int(float64(isl)*cf))
			near(fmt.Sprintf("ttft isl=%d cf=%v", isl, cf), got.PrefillMs(float64(isl), cf), want)
		}
	}
	// The half prompts taught (isl/2, 0) too: 256 and 1024.
	for _, isl := range []int{256, 1024} {
		near(fmt.Sprintf("ttft isl=%d (from the halves)", isl), got.PrefillMs(float64(isl), 0), tm.PrefillMs(isl))
	}
	for _, c := range concs {
		want := tm.DecodeMs(float64(c) * 520 / capacity)
		near(fmt.Sprintf("itl c=%d ctx=512", c), got.ITLMs(float64(c), 512), want)
	}
	// An unlearned cell keeps the base's (tripled) value.
	if v, w := got.ITLMs(64, 4096), base.ITLMs(64, 4096); v != w {
		t.Errorf("unlearned itl c=64 ctx=4096: %v, want the base's %v", v, w)
	}
}
