package frontend

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/dispatch"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/nodes/worker"
	"github.com/tandemllm/tandem/tokenizer"
)

var quiet = slog.New(slog.DiscardHandler)

type harness struct {
	t       testing.TB
	model   *tokenizer.Model
	reg     *discovery.Mem
	fe      *Process
	natsURL string // workers relay their events here when set
}

func newHarness(t *testing.T, mode string) *harness {
	t.Helper()
	return newHarnessWith(t, mode, nil, Options{})
}

// newHarnessWith also lets the test edit the config and set options
// (Registry and Logger are the harness's).
func newHarnessWith(t testing.TB, mode string, edit func(*Config), opts Options) *harness {
	t.Helper()
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, model: model, reg: discovery.NewMem()}
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.RouterMode = "127.0.0.1:0", mode
	cfg.KV.Seed = 1
	if edit != nil {
		edit(&cfg)
	}
	opts.Registry, opts.Logger = h.reg, quiet
	h.fe, err = Start(context.Background(), cfg, model, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.fe.Shutdown(context.Background()) })
	return h
}

// startWorker runs a mocker worker registered in the harness's registry.
func (h *harness) startWorker(id string, speedup float64) *worker.Worker {
	h.t.Helper()
	return h.startRole(id, "aggregated", speedup, nil)
}

// startRole runs a mocker worker in role; edit, if set, adjusts the
// mocker's config.
func (h *harness) startRole(id, role string, speedup float64, edit func(*mocker.Config)) *worker.Worker {
	h.t.Helper()
	mc := mocker.DefaultConfig()
	mc.Model = h.model.Name
	mc.EOS = h.model.Tokenizer.EOS()
	mc.Vocabulary = h.model.Tokenizer.Encode(mocker.DefaultText)
	mc.Speedup = speedup
	mc.KVEvents.Endpoint = "tcp://127.0.0.1:0"
	if h.natsURL != "" {
		mc.KVEvents.ReplayEndpoint = "tcp://127.0.0.1:0"
	}
	if edit != nil {
		edit(&mc)
	}
	e, err := mocker.New(mc)
	if err != nil {
		h.t.Fatal(err)
	}
	cfg := worker.DefaultConfig()
	cfg.ID, cfg.DeregisterDelay, cfg.Role = id, 0, role
	if h.natsURL != "" {
		cfg.EventPlane.Plane, cfg.EventPlane.NATS = "nats", h.natsURL
	}
	w, err := worker.Start(context.Background(), cfg, e, h.model, worker.Options{Registry: h.reg, Logger: quiet})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
	return w
}

func (h *harness) waitMembers(want ...string) {
	h.t.Helper()
	// Generous: a worker's start, registration and the frontend's watch
	// can take seconds on a loaded 2-core machine under -race.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := h.fe.Members()
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("members %v, want %v", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// complete sends one streamed completion and returns the worker and the
// whole body.
func (h *harness) complete(prompt string, maxTokens int) (string, string, int) {
	h.t.Helper()
	body := fmt.Sprintf(`{"model":"tandem-mock","prompt":%q,"max_tokens":%d,"ignore_eos":true,"stream":true}`, prompt, maxTokens)
	resp, err := http.Post(h.fe.URL()+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.Header.Get("X-Tandem-Worker"), string(b), resp.StatusCode
}

// TestFrontendFollowsRegistry: workers join and leave the router (and, in
// kv mode, the KV policy) as their records come and go.
func TestFrontendFollowsRegistry(t *testing.T) {
	for _, mode := range []string{"round-robin", "kv"} {
		t.Run(mode, func(t *testing.T) {
			h := newHarness(t, mode)
			h.startWorker("w1", 50)
			w2 := h.startWorker("w2", 50)
			h.waitMembers("w1", "w2")
			seen := map[string]bool{}
			for i := 0; i < 6; i++ {
				id, body, code := h.complete(fmt.Sprintf("request %d about a robot", i), 4)
				if code != 200 || !strings.HasSuffix(body, "data: [DONE]\n\n") {
					t.Fatalf("status %d: %s", code, body)
				}
				seen[id] = true
			}
			if mode == "round-robin" && len(seen) != 2 {
				t.Fatalf("requests went to %v, want both workers", seen)
			}
			if h.fe.KV != nil {
				if _, ok := h.fe.KV.Health()["w2"]; !ok {
					t.Fatalf("kv policy does not follow w2: %v", h.fe.KV.Health())
				}
			}
			if err := w2.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			h.waitMembers("w1")
			for i := 0; i < 3; i++ {
				if id, _, code := h.complete("after w2 left", 2); code != 200 || id != "w1" {
					t.Fatalf("status %d from %q after w2 left", code, id)
				}
			}
			if h.fe.KV != nil {
				if _, ok := h.fe.KV.Health()["w2"]; ok {
					t.Fatal("w2 still in the kv policy")
				}
			}
		})
	}
}

// TestWorkerAdmission: workers the frontend cannot use are refused with a
// diagnostic naming why, and admitted once their record is fixed.
func TestWorkerAdmission(t *testing.T) {
	model, _ := tokenizer.Default()
	layout := discovery.KVLayout{Model: model.Name, DType: "bf16", BlockSize: 16, TokenizerHash: model.Tokenizer.Fingerprint()}
	rec := func(id string, role discovery.Role, edit func(*discovery.Record)) discovery.Record {
		r := discovery.Record{ID: id, Model: model.Name, Role: role, RequestPlane: "127.0.0.1:1", KVLayout: layout, Engine: "mocker"}
		if edit != nil {
			edit(&r)
		}
		return r
	}
	cases := []struct {
		name    string
		first   []discovery.Record
		rec     discovery.Record
		diag    string
		members []string
	}{
		{"aggregated", nil, rec("a", discovery.RoleAggregated, nil), "", []string{"a"}},
		{"other model", nil, rec("a", discovery.RoleAggregated, func(r *discovery.Record) { r.Model = "llama" }), discovery.DiagModelUnserved, nil},
		{"other tokenizer", nil, rec("a", discovery.RoleAggregated, func(r *discovery.Record) { r.KVLayout.TokenizerHash = "beef" }), discovery.DiagTokenizer, nil},
		{"decode matching prefill", []discovery.Record{rec("p", discovery.RolePrefill, nil)}, rec("d", discovery.RoleDecode, nil), "", []string{"d", "p"}},
		{"decode with other block size", []discovery.Record{rec("p", discovery.RolePrefill, nil)},
			rec("d", discovery.RoleDecode, func(r *discovery.Record) { r.KVLayout.BlockSize = 32 }), discovery.DiagKVLayoutMismatch, []string{"p"}},
		{"prefill with other dtype", []discovery.Record{rec("d", discovery.RoleDecode, nil)},
			rec("p", discovery.RolePrefill, func(r *discovery.Record) { r.KVLayout.DType = "fp8" }), discovery.DiagKVLayoutMismatch, []string{"d"}},
		{"aggregated with other layout", []discovery.Record{rec("p", discovery.RolePrefill, nil)},
			rec("a", discovery.RoleAggregated, func(r *discovery.Record) { r.KVLayout.BlockSize = 32 }), "", []string{"a", "p"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, "round-robin")
			for _, r := range c.first {
				h.fe.admit(r)
			}
			h.fe.admit(c.rec)
			if got := h.fe.Members(); !slices.Equal(got, c.members) {
				t.Fatalf("members %v, want %v", got, c.members)
			}
			for _, code := range []string{discovery.DiagModelUnserved, discovery.DiagTokenizer, discovery.DiagKVLayoutMismatch} {
				if got := h.fe.Board.IsActive(code, c.rec.ID); got != (code == c.diag) {
					t.Errorf("%s active = %v", code, got)
				}
			}
			if c.diag == discovery.DiagKVLayoutMismatch {
				var d health.Diagnostic
				for _, x := range h.fe.Board.Active() {
					if x.Code == discovery.DiagKVLayoutMismatch {
						d = x
					}
				}
				peer := c.first[0]
				for _, want := range []string{c.rec.KVLayout.Fingerprint(), peer.KVLayout.Fingerprint(), peer.ID} {
					if !strings.Contains(d.Message, want) {
						t.Errorf("message %q lacks %q", d.Message, want)
					}
				}
			}
			if c.diag == discovery.DiagKVLayoutMismatch {
				// When the counterpart leaves, the refused worker pairs
				// with nobody and is admitted.
				h.fe.remove(c.first[0].ID, "test")
				if got := h.fe.Members(); !slices.Equal(got, []string{c.rec.ID}) || h.fe.Board.IsActive(c.diag, c.rec.ID) {
					t.Fatalf("after its counterpart left: members %v, diagnostics %v", got, h.fe.Board.Active())
				}
				h.fe.admit(c.first[0])
			}
			if c.diag != "" {
				fixed := rec(c.rec.ID, c.rec.Role, nil)
				h.fe.admit(fixed)
				if !slices.Contains(h.fe.Members(), c.rec.ID) || h.fe.Board.IsActive(c.diag, c.rec.ID) {
					t.Fatalf("fixed record not admitted: members %v, diagnostics %v", h.fe.Members(), h.fe.Board.Active())
				}
			}
		})
	}
}

// TestDeadWorkerRequestsRetried: a registered worker that is gone (its
// record not yet expired) costs a retry, never a failed request, and is
// quarantined rather than tried again by every request.
func TestDeadWorkerRequestsRetried(t *testing.T) {
	h := newHarness(t, "round-robin")
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	dead.Close()
	r := discovery.Record{ID: "dead", Model: h.model.Name, Role: discovery.RoleAggregated, RequestPlane: addr,
		KVLayout: discovery.KVLayout{Model: h.model.Name, BlockSize: 16, TokenizerHash: h.model.Tokenizer.Fingerprint()}}
	if _, err := h.reg.Register(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	h.startWorker("live", 50)
	h.waitMembers("dead", "live")
	const n = 8
	for i := 0; i < n; i++ {
		if id, body, code := h.complete("hello", 2); code != 200 || id != "live" {
			t.Fatalf("request %d: status %d from %q: %s", i, code, id, body)
		}
	}
	// Round robin would send every other request to the dead worker; after
	// its first failure it is quarantined instead (one more try per
	// doubling window at most), and the state is on /health.
	if got := retries(t, h); got < 1 || got > 2 {
		t.Fatalf("%v retries, want 1 (2 if a quarantine window passed)", got)
	}
	if !h.fe.Board.IsActive(dispatch.DiagWorkerUnreachable, "dead") {
		t.Fatalf("no %s for the dead worker: %v", dispatch.DiagWorkerUnreachable, h.fe.Board.Active())
	}
}

func retries(t *testing.T, h *harness) float64 {
	t.Helper()
	mfs, err := h.fe.Metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "tandem_frontend_retries_total" {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestDrainingWorkerFinishesStreams: a worker that deregisters while
// streaming keeps its connection until its streams end; new requests go
// elsewhere.
func TestDrainingWorkerFinishesStreams(t *testing.T) {
	h := newHarness(t, "round-robin")
	slow := h.startWorker("a", 5)
	h.waitMembers("a")
	var wg sync.WaitGroup
	type result struct {
		id, body string
		code     int
	}
	res := make(chan result, 1)
	streaming := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp, err := http.Post(h.fe.URL()+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"tandem-mock","prompt":"a long story","max_tokens":200,"ignore_eos":true,"stream":true}`))
		if err != nil {
			close(streaming)
			res <- result{body: err.Error()}
			return
		}
		defer resp.Body.Close()
		// The first bytes of the stream, not a fixed sleep, say it runs
		// on a before b joins and a leaves.
		first := make([]byte, 1)
		n, _ := io.ReadFull(resp.Body, first)
		close(streaming)
		rest, _ := io.ReadAll(resp.Body)
		res <- result{resp.Header.Get("X-Tandem-Worker"), string(first[:n]) + string(rest), resp.StatusCode}
	}()
	select {
	case <-streaming:
	case <-time.After(30 * time.Second):
		t.Fatal("the long stream never started")
	}
	h.startWorker("b", 50)
	h.waitMembers("a", "b")
	shut := make(chan error, 1)
	go func() { shut <- slow.Shutdown(context.Background()) }()
	h.waitMembers("b")
	for i := 0; i < 3; i++ {
		if id, _, code := h.complete("new request", 2); code != 200 || id != "b" {
			t.Fatalf("status %d from %q while a drains", code, id)
		}
	}
	r := <-res
	if r.code != 200 || r.id != "a" || !strings.HasSuffix(r.body, "data: [DONE]\n\n") || strings.Contains(r.body, `"error"`) {
		t.Fatalf("draining worker's stream: status %d worker %q body tail %q", r.code, r.id, tail(r.body))
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

func tail(s string) string {
	if len(s) > 300 {
		return s[len(s)-300:]
	}
	return s
}

// TestKVEventsOverNATS: in kv mode with the nats event plane, workers'
// batches reach the frontend's KV index through their model's subject
// (the frontend runs the embedded server; workers connect to it).
func TestKVEventsOverNATS(t *testing.T) {
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, model: model, reg: discovery.NewMem()}
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.RouterMode = "127.0.0.1:0", "kv"
	cfg.EventPlane.Plane, cfg.EventPlane.NATS, cfg.EventPlane.EmbeddedAddr = "nats", "embedded", "127.0.0.1:0"
	h.fe, err = Start(context.Background(), cfg, model, Options{Registry: h.reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.fe.Shutdown(context.Background()) })
	h.natsURL = h.fe.NATSURL()
	for _, id := range []string{"w1", "w2"} {
		h.startWorker(id, 50)
	}
	h.waitMembers("w1", "w2")
	prompt := strings.Repeat("the same long shared prefix of many words ", 12)
	first, _, code := h.complete(prompt, 2)
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	// The index learns the prompt's blocks only from the relayed events.
	deadline := time.Now().Add(30 * time.Second)
	for blockEvents(t, h, first) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no KV events from %s reached the index over NATS", first)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := 0; i < 4; i++ {
		if id, _, _ := h.complete(prompt, 2); id != first {
			t.Fatalf("repeat %d went to %s, want %s (which holds the prefix)", i, id, first)
		}
	}
	if st := h.fe.KV.Health()[first]; st != "healthy" {
		t.Fatalf("%s event state %q", first, st)
	}
}

func blockEvents(t *testing.T, h *harness, worker string) float64 {
	t.Helper()
	mfs, err := h.fe.Metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tandem_router_kv_block_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "worker" && l.GetValue() == worker {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
