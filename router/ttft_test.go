package router

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeTiming is an engine's own estimate: prefill = base + perTok·n,
// decode step = dec (seconds).
type fakeTiming struct{ base, perTok, dec float64 }

func (f fakeTiming) EstimatePrefill(n int) float64  { return f.base + f.perTok*float64(n) }
func (f fakeTiming) EstimateDecodeStep(int) float64 { return f.dec }

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTTFTFixture(t *testing.T, n int, cost CostModel, timing fakeTiming) (*kvFixture, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1000, 0)}
	f := newKVFixture(t, false, n, func(c *KVConfig) { c.Cost = cost; c.Now = clk.Now })
	for _, w := range f.r.Workers() {
		w.Timing = timing
		f.r.AddWorker(w)
	}
	return f, clk
}

func TestTTFTModelLearnsFromPrior(t *testing.T) {
	m := newTimingModel(nil)
	if c := m.coefs(); c.a != priorA || c.b != priorB || c.d != priorD {
		t.Fatalf("no samples: %+v, want the prior", c)
	}
	// An upstream server 3× slower per token than the prior, with a 40 ms
	// constant and 25 ms more while it decodes.
	a, b, d := 0.040, 3*priorB, 0.025
	for i := range 200 {
		n := 100 + (i*733)%8000
		dec := i%3 == 0
		y := a + b*float64(n)
		if dec {
			y += d
		}
		obs := time.Duration(y * 1e9)
		m.observe(n, dec, 0, obs, obs)
	}
	c := m.coefs()
	for _, tc := range []struct {
		name      string
		got, want float64
	}{{"base", c.a, a}, {"per token", c.b, b}, {"decode", c.d, d}} {
		if math.Abs(tc.got-tc.want) > 0.1*tc.want {
			t.Errorf("%s: learned %.6g, want %.6g ± 10%%", tc.name, tc.got, tc.want)
		}
	}
	// An engine's own estimate wins over the learned rates.
	m.setSource(fakeTiming{base: 0.001, perTok: 1e-6, dec: 0.002}, 0)
	if _, got := m.estimate(1000, 0, 0, true); math.Abs(got-0.002) > 1e-12 {
		t.Errorf("engine prefill %v, want 0.002", got)
	}
	if got, _ := m.estimate(1000, 3, 0, true); math.Abs(got-(0.002+0.002*1.5)) > 1e-12 {
		t.Errorf("engine prefill with decodes %v, want 0.005 (one step, and half of the one in progress)", got)
	}
	if false {
	}
}

func TestTTFTModelRejectsUnphysicalFits(t *testing.T) {
	m := newTimingModel(nil)
	// Observations that fall with more tokens would fit a negative rate.
	for i := range 100 {
		n := 100 + i*50
		obs := time.Duration(float64(time.Second) / float64(n))
		m.observe(n, false, 0, obs, obs)
	}
	if c := m.coefs(); c.b <= 0 || c.a < 0 || c.d < 0 {
		t.Fatalf("coefficients %+v: a prefill must take time and grow with its tokens", c)
	}
}

// TestTTFTCostKeepsPrefixUnderLoad is the seed report's miss: the worker
// holding a request's prefix is one request busier than the other. The
// weighted costs send it away (Dynamo's load term outweighs the cached
// prefix); the ttft cost keeps it, since recomputing 1,500 tokens takes far
// longer than one decode step.
func TestTTFTCostKeepsPrefixUnderLoad(t *testing.T) {
	timing := fakeTiming{base: 0.0136, perTok: 0.0436e-3, dec: 0.010} // the seeds' Qwen3-0.6B
	for _, tc := range []struct {
		cost CostModel
		want string
	}{{CostTTFT, "w0"}, {CostDynamo, "w1"}} {
		t.Run(string(tc.cost), func(t *testing.T) {
			f, _ := newTTFTFixture(t, 2, tc.cost, timing)
			pre := prompt(7, 375) // 1,500 tokens
			f.ingest(t, "w0", 0, storedEvent(pre, 1))
			// Two requests decoding on w0 (past their first tokens), one on
			// w1: w0 holds 2 × 375 more blocks in flight.
			busy := func(w string, p int) {
				req := &Request{Model: "m", Tokens: prompt(p, 375)}
				f.kv.Routed(req, Decision{WorkerID: w})
				f.kv.FirstToken(req, w, 0)
			}
			busy("w0", 20)
			busy("w0", 21)
			busy("w1", 22)
			req := append(append(prompt(7, 375)[:0:0], pre...), prompt(8, 6)...)
			d, err := f.kv.Pick(&Request{Model: "m", Tokens: req}, []Candidate{{ID: "w0"}, {ID: "w1"}})
			if err != nil {
				t.Fatal(err)
			}
			if d.WorkerID != tc.want {
				t.Fatalf("%s cost chose %s, want %s", tc.cost, d.WorkerID, tc.want)
			}
		})
	}
}

// TestTTFTCostSpreadsColdTraffic: with nothing cached, equal predictions
// are ties broken by load, and the virtual queue makes a worker that was
// just given a prefill dearer than an idle one.
func TestTTFTCostSpreadsColdTraffic(t *testing.T) {
	f, _ := newTTFTFixture(t, 3, CostTTFT, fakeTiming{base: 0.01, perTok: 1e-5, dec: 0.005})
	seen := map[string]int{}
	for i := range 6 {
		rt, err := f.r.Route(&Request{Model: "m", Tokens: prompt(100+i, 64)})
		if err != nil {
			t.Fatal(err)
		}
		seen[rt.Worker.ID]++
		defer rt.Done()
	}
	for _, w := range []string{"w0", "w1", "w2"} {
		if seen[w] != 2 {
			t.Fatalf("placement %v: want 2 each", seen)
		}
	}
}

// TestTTFTVirtualQueue checks the router's prefill queue per worker: a
// second prefill starts when the first is predicted to end; a first token
// earlier than predicted pulls the queue forward; it drains with the last.
func TestTTFTVirtualQueue(t *testing.T) {
	f, clk := newTTFTFixture(t, 1, CostTTFT, fakeTiming{base: 0.010, perTok: 0, dec: 0})
	a := &Request{Model: "m", Tokens: prompt(1, 8)}
	b := &Request{Model: "m", Tokens: prompt(2, 8)}
	c := &Request{Model: "m", Tokens: prompt(3, 8)}
	for _, r := range []*Request{a, b, c} {
		if _, err := f.kv.Pick(r, []Candidate{{ID: "w0"}}); err != nil {
			t.Fatal(err)
		}
		f.kv.Routed(r, Decision{WorkerID: "w0"})
	}
	start := clk.Now().UnixNano()
	fl := func(r *Request) *flight { f.kv.mu.RLock(); defer f.kv.mu.RUnlock(); return f.kv.flights[r] }
	if got := []int64{fl(a).predStart - start, fl(b).predStart - start, fl(c).predStart - start}; got[0] != 0 || got[1] != 10e6 || got[2] != 20e6 {
		t.Fatalf("predicted starts %v ns, want 0, 10 ms, 20 ms", got)
	}
	busy := func() time.Duration {
		f.kv.active.mu.Lock()
		defer f.kv.active.mu.Unlock()
		return time.Duration(f.kv.active.load[0].busyUntil - clk.Now().UnixNano())
	}
	clk.Add(4 * time.Millisecond) // a is 6 ms early
	f.kv.FirstToken(a, "w0", 0)
	if got := busy(); got != 20*time.Millisecond {
		t.Fatalf("after an early first token the queue drains in %v, want 20ms", got)
	}
	f.kv.Finished(b, "w0") // cancelled before its first token
	if got := busy(); got != 10*time.Millisecond {
		t.Fatalf("after a cancellation the queue drains in %v, want 10ms", got)
	}
	clk.Add(30 * time.Millisecond) // c is late
	f.kv.FirstToken(c, "w0", 0)
	if got := busy(); got != 0 {
		t.Fatalf("with nothing prefilling the queue is %v, want empty", got)
	}
}

// TestTTFTModelDrift: a worker whose TTFTs stay far from the predictions
// raises ttft_model_drift (log line, diagnostic metric, board detail) and
// its decisions use the weighted cost; it clears once the error falls.
func TestTTFTModelDrift(t *testing.T) {
	f, clk := newTTFTFixture(t, 1, CostTTFT, fakeTiming{base: 0.010, perTok: 0, dec: 0})
	serve := func(took time.Duration) {
		rt, err := f.r.Route(&Request{Model: "m", Tokens: prompt(5, 8)})
		if err != nil {
			t.Fatal(err)
		}
		clk.Add(took)
		rt.FirstToken(0)
		rt.Done()
	}
	for range ttftDriftMinimum - 1 {
		serve(100 * time.Millisecond) // 10× the 10 ms predicted
	}
	if f.board.IsActive(DiagTTFTDrift, "w0") {
		t.Fatal("drift raised before the window filled")
	}
	for range 4 {
		serve(100 * time.Millisecond)
	}
	drifting := 0
	for _, w := range []string{"w0"} {
		if f.board.IsActive(DiagTTFTDrift, w) {
			drifting++
			st, _ := f.kv.TTFTModel(w)
			if !st.Drifting || st.MeanError < ttftDriftRaise {
				t.Errorf("%s: model state %+v", w, st)
			}
		}
	}
	if drifting == 0 {
		a, _ := f.kv.TTFTModel("w0")
		t.Fatalf("no ttft_model_drift after 20 TTFTs 10× the prediction: %+v", a)
	}
	if !strings.Contains(f.logs.String(), "diagnostic_code="+DiagTTFTDrift) {
		t.Errorf("no log line with the code: %s", f.logs.String())
	}
	if n := testutil.CollectAndCount(f.kv.met.ttftRatio); n == 0 {
		t.Error("no TTFT prediction histogram")
	}
	if got := f.kv.drifting.Load(); got != int32(drifting) {
		t.Errorf("drifting count %d, want %d", got, drifting)
	}
	if v := testutil.ToFloat64(f.kv.met.ttftErr.WithLabelValues("w0")); v < ttftDriftRaise {
		t.Errorf("error gauge %v", v)
	}
	if !strings.Contains(collectText(t, f), `tandem_diagnostic_active{code="ttft_model_drift",subject="w0"} 1`) {
		t.Error("diagnostic metric not set")
	}
	// Predictions come true again: the error falls and the code clears.
	for range 3 * ttftDriftWindow {
		serve(10 * time.Millisecond)
	}
	for _, w := range []string{"w0"} {
		if f.board.IsActive(DiagTTFTDrift, w) {
			st, _ := f.kv.TTFTModel(w)
			t.Errorf("%s still drifting after accurate predictions: %+v", w, st)
		}
	}
	if !strings.Contains(f.logs.String(), DiagTTFTRecovered) {
		t.Error("no recovery log line")
	}
	if f.kv.drifting.Load() != 0 {
		t.Errorf("drifting count %d after recovery", f.kv.drifting.Load())
	}
}

func collectText(t *testing.T, f *kvFixture) string {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			b.WriteString(mf.GetName() + "{")
			for i, l := range m.GetLabel() {
				if i > 0 {
					b.WriteString(",")
				}
				b.WriteString(l.GetName() + "=\"" + l.GetValue() + "\"")
			}
			v := m.GetGauge().GetValue()
			b.WriteString("} " + strconv.FormatFloat(v, 'g', -1, 64) + "\n")
		}
	}
	return b.String()
}

// TestTTFTCostAvoidsFullKV: a worker whose running requests would leave no
// KV memory for this one is avoided even though it holds the prefix (it
// could only admit it after some finish, or preempt).
func TestTTFTCostAvoidsFullKV(t *testing.T) {
	f, _ := newTTFTFixture(t, 2, CostTTFT, fakeTiming{base: 0.0136, perTok: 0.0436e-3, dec: 0.010})
	for _, w := range f.r.Workers() {
		w.Info.KVCapacityTokens = 2000 * tbs
		f.r.AddWorker(w)
	}
	pre := prompt(7, 375)
	f.ingest(t, "w0", 0, storedEvent(pre, 1))
	req := &Request{Model: "m", Tokens: prompt(20, 1500)} // 1,500 blocks decoding on w0
	f.kv.Routed(req, Decision{WorkerID: "w0"})
	f.kv.FirstToken(req, "w0", 0)
	d, err := f.kv.Pick(&Request{Model: "m", Tokens: append(append(prompt(7, 375)[:0:0], pre...), prompt(8, 6)...)},
		[]Candidate{{ID: "w0"}, {ID: "w1"}})
	if err != nil {
		t.Fatal(err)
	}
	if d.WorkerID != "w1" {
		t.Fatalf("chose %s: 1,500 + 381 of 2,000 blocks is past 90%% of w0's KV", d.WorkerID)
	}
}

// TestTTFTUnmeasuredWorkerNotStarved: upstream servers (no engine
// estimate) that are 10× faster than the prior. Once one is measured, an
// unmeasured one is priced with the measured rates, so cold traffic still
// spreads to it instead of staying on the measured worker.
func TestTTFTUnmeasuredWorkerNotStarved(t *testing.T) {
	f, clk := newTTFTFixture(t, 2, CostTTFT, fakeTiming{})
	for _, w := range f.r.Workers() {
		w.Timing = nil
		f.r.AddWorker(w)
	}
	seen := map[string]int{}
	for i := range 20 {
		rt, err := f.r.Route(&Request{Model: "m", Tokens: prompt(200+i, 64)})
		if err != nil {
			t.Fatal(err)
		}
		clk.Add(2 * time.Millisecond) // the prior says ≈ 25 ms
		rt.FirstToken(0)
		rt.Done()
		seen[rt.Worker.ID]++
	}
	if seen["w0"] < 5 || seen["w1"] < 5 {
		t.Fatalf("placement %v: an unmeasured worker was starved", seen)
	}
}

// TestTTFTCostSharedPrefixLoadDecides: a prefix that every request in
// flight carries (a system prompt) is priced as held by every worker, so
// an idle worker without it beats a decoding holder (the copy is paid
// once); a cached prefix the traffic in flight does not share keeps its
// holder (TestNoStarvation end to end).
func TestTTFTCostSharedPrefixLoadDecides(t *testing.T) {
	timing := fakeTiming{base: 0.0136, perTok: 0.0436e-3, dec: 0.010} // the seeds' Qwen3-0.6B
	for _, tc := range []struct {
		name   string
		shared bool // the requests in flight carry the prefix
		want   string
	}{{"shared by all in flight", true, "w1"}, {"shared by none in flight", false, "w0"}} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := newTTFTFixture(t, 2, CostTTFT, timing)
			sys := prompt(7, 125) // 2,000 tokens
			f.ingest(t, "w0", 0, storedEvent(sys, 1))
			for i := range ttftSharedMin { // decoding on w0, past their first tokens
				toks := prompt(20+i, 13)
				if tc.shared {
					toks = append(append(prompt(7, 125)[:0:0], sys...), toks...)
				}
				req := &Request{Model: "m", Tokens: toks}
				f.kv.Routed(req, Decision{WorkerID: "w0"})
				f.kv.FirstToken(req, "w0", 0)
			}
			req := append(append(prompt(7, 125)[:0:0], sys...), prompt(8, 13)...)
			d, err := f.kv.Pick(&Request{Model: "m", Tokens: req}, []Candidate{{ID: "w0"}, {ID: "w1"}})
			if err != nil {
				t.Fatal(err)
			}
			if d.WorkerID != tc.want {
				t.Fatalf("chose %s (cost %.4f, runner-up %.4f), want %s", d.WorkerID, d.Cost, d.RunnerUpCost, tc.want)
			}
		})
	}
}
