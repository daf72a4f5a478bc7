package doctor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/control/doctor"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/httpapi"
	"github.com/tandemllm/tandem/nodes/frontend"
	"github.com/tandemllm/tandem/nodes/worker"
	"github.com/tandemllm/tandem/tokenizer"
)

var quiet = slog.New(slog.DiscardHandler)

// deployment is a real multi-process deployment in one test process: a
// frontend and workers over real sockets, finding each other through the
// file discovery backend that the doctor reads too.
type deployment struct {
	t     *testing.T
	model *tokenizer.Model
	dir   string
	reg   *discovery.File
	fe    *frontend.Process
	ws    map[string]*worker.Worker
}

func newFile(t *testing.T, dir string) *discovery.File {
	t.Helper()
	r, err := discovery.NewFile(discovery.FileConfig{Common: discovery.Common{Logger: quiet}, Dir: dir, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func newDeployment(t *testing.T, edit func(*frontend.Config)) *deployment {
	t.Helper()
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	d := &deployment{t: t, model: model, dir: t.TempDir(), ws: map[string]*worker.Worker{}}
	d.reg = newFile(t, d.dir)
	cfg := frontend.DefaultConfig()
	cfg.HTTPAddr, cfg.RouterMode, cfg.Disagg.Mode = "127.0.0.1:0", "kv", "auto"
	cfg.KV.Seed = 1
	if edit != nil {
		edit(&cfg)
	}
	d.fe, err = frontend.Start(context.Background(), cfg, model, frontend.Options{Registry: d.reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.fe.Shutdown(context.Background()) })
	return d
}

// start runs a mocker worker in role; edit may change its engine and
// worker configs.
func (d *deployment) start(id, role string, edit func(*mocker.Config, *worker.Config)) {
	d.t.Helper()
	mc := mocker.DefaultConfig()
	mc.Model = d.model.Name
	mc.EOS = d.model.Tokenizer.EOS()
	mc.Vocabulary = d.model.Tokenizer.Encode(mocker.DefaultText)
	mc.Speedup = 100
	mc.KVEvents.Endpoint = "tcp://127.0.0.1:0"
	wc := worker.DefaultConfig()
	wc.ID, wc.DeregisterDelay, wc.Role, wc.MetricsAddr = id, 0, role, "127.0.0.1:0"
	if edit != nil {
		edit(&mc, &wc)
	}
	e, err := mocker.New(mc)
	if err != nil {
		d.t.Fatal(err)
	}
	w, err := worker.Start(context.Background(), wc, e, d.model, worker.Options{Registry: d.reg, Logger: quiet})
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
	d.ws[id] = w
}

func (d *deployment) config(edit func(*doctor.Config)) doctor.Config {
	cfg := doctor.Config{FrontendURL: d.fe.URL(), Registry: newFile(d.t, d.dir), Timeout: 5 * time.Second,
		DiscoveryFix: "remove " + d.dir + "/{id}.json", MaxTransferTime: 60 * time.Second,
		// Off by default: other processes on a shared test host must not
		// show up in a report; TestLeftovers turns it on with names of
		// its own.
		SameHost: "off"}
	if edit != nil {
		edit(&cfg)
	}
	return cfg
}

// eventually runs the doctor until done accepts its report (a deployment
// needs a moment to converge: records watched, links probed), and returns
// the last report.
func eventually(t *testing.T, cfg doctor.Config, done func(*doctor.Report) bool) *doctor.Report {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rep, err := doctor.Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if done(rep) {
			return rep
		}
		if time.Now().After(deadline) {
			var b bytes.Buffer
			_ = rep.Text(&b)
			t.Fatalf("the doctor's report never reached the expected state:\n%s", b.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// has returns the report's check id[subject] with verdict v, if any.
func has(rep *doctor.Report, id, subject string, v doctor.Verdict) *doctor.Check {
	for _, c := range rep.Find(id, subject) {
		if c.Verdict == v {
			return &c
		}
	}
	return nil
}

// measured: every prefill/decode link check has a measured verdict.
func measured(rep *doctor.Report, pairs ...string) bool {
	for _, p := range pairs {
		cs := rep.Find(doctor.IDDisaggLink, p)
		if len(cs) == 0 || strings.Contains(cs[0].Summary, "not measured") || strings.Contains(cs[0].Summary, "not been measured") {
			return false
		}
	}
	return true
}

// shaped is a connection whose writes run at bps, the way a slow network
// link paces a sender (the seeds' 104 MB/s 1GbE link, scaled down).
type shaped struct {
	net.Conn
	bps   float64
	mu    sync.Mutex
	start time.Time
	sent  int64
}

func (c *shaped) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start.IsZero() {
		c.start = time.Now()
	}
	n := 0
	for len(b) > 0 {
		k := min(len(b), 32<<10)
		m, err := c.Conn.Write(b[:k])
		n += m
		c.sent += int64(m)
		if err != nil {
			return n, err
		}
		b = b[k:]
		if d := time.Until(c.start.Add(time.Duration(float64(c.sent) / c.bps * float64(time.Second)))); d > 0 {
			time.Sleep(d)
		}
	}
	return n, nil
}

func slowDial(bps float64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var nd net.Dialer
		c, err := nd.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &shaped{Conn: c, bps: bps}, nil
	}
}

// TestHealthyPassesClean: a disaggregated, KV-routed deployment with every
// part up passes with no warning and no failure, and exits clean.
func TestHealthyPassesClean(t *testing.T) {
	d := newDeployment(t, nil)
	d.start("p0", "prefill", nil)
	d.start("d0", "decode", nil)
	d.start("d1", "decode", nil)
	cfg := d.config(func(c *doctor.Config) {
		c.Expect = []doctor.Expectation{{N: 3}, {Role: discovery.RolePrefill, N: 1}, {Model: d.model.Name, Role: discovery.RoleDecode, N: 2}}
	})
	rep := eventually(t, cfg, func(r *doctor.Report) bool {
		return r.Warn == 0 && r.Fail == 0 && measured(r, "p0->d0", "p0->d1") && len(r.Find(doctor.IDKVEvents, "")) == 2
	})
	for _, id := range []string{doctor.IDFrontendHealth, doctor.IDFrontendMetrics, doctor.IDDiscoveryRead, doctor.IDWorkersExpected, doctor.IDBlockSize, doctor.IDDisaggLayout, doctor.IDDisaggLink} {
		if len(rep.Find(id, "")) == 0 {
			t.Errorf("no %s check in a clean report", id)
		}
	}
	var b bytes.Buffer
	if err := rep.JSON(&b); err != nil {
		t.Fatal(err)
	}
	var back doctor.Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.OK != rep.OK || back.Failed() {
		t.Fatalf("JSON report does not round-trip: %v %+v", err, back)
	}
}

// TestSeedFailures injects each failure the seeds met into a live
// deployment and checks that the doctor names it, with the right fix.
func TestSeedFailures(t *testing.T) {
	type want struct {
		id, subject string
		fix         string // a part of the fix line
	}
	cases := []struct {
		name   string
		build  func(d *deployment)
		doctor func(d *deployment, c *doctor.Config)
		want   []want
	}{{
		name: "events off on one worker",
		build: func(d *deployment) {
			d.start("w0", "aggregated", nil)
			d.start("w1", "aggregated", func(mc *mocker.Config, _ *worker.Config) { mc.KVEvents.Enabled = false })
		},
		want: []want{{doctor.IDKVEvents, "w1", "--kv-events on"}},
	}, {
		name: "one worker never started",
		build: func(d *deployment) {
			d.start("p0", "prefill", nil)
			d.start("d0", "decode", nil)
		},
		doctor: func(_ *deployment, c *doctor.Config) {
			c.Expect = []doctor.Expectation{{Role: discovery.RoleDecode, N: 2}}
		},
		want: []want{{doctor.IDWorkersExpected, "/decode=2", "start the missing /decode=2 worker(s)"}},
	}, {
		name: "slow prefill/decode link",
		build: func(d *deployment) {
			d.start("d0", "decode", nil)
			// 1 MB/s: a 1,500-token prompt of the mocker's 114,688 bytes a
			// token takes 172 s, far over the tests' 60 s budget, which
			// loopback passes even on a loaded machine (it needs 3 MB/s).
			d.start("p0", "prefill", func(_ *mocker.Config, wc *worker.Config) { wc.Transfer.Dial = slowDial(1e6) })
		},
		want: []want{{doctor.IDDisaggLink, "p0->d0", "faster link"}},
	}, {
		name: "mismatched block sizes",
		build: func(d *deployment) {
			d.start("p0", "prefill", nil)
			d.start("d0", "decode", nil)
			d.start("d1", "decode", func(mc *mocker.Config, _ *worker.Config) { mc.BlockSize = 32 })
		},
		want: []want{
			{doctor.IDBlockSize, "", "restart d1 with --block-size 16"},
			{doctor.IDDisaggLayout, "p0->d1", "one configuration"},
		},
	}, {
		name: "stale discovery record",
		build: func(d *deployment) {
			d.start("w0", "aggregated", nil)
			// A worker that died without deregistering: its record
			// outlives it (another host's process, an unexpired lease)
			// and names a port nobody listens on any more.
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				d.t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close()
			rec := d.ws["w0"].Record()
			rec.ID, rec.RequestPlane, rec.MetricsAddr = "ghost", addr, ""
			rec.KVEvents = discovery.KVEvents{}
			if _, err := newFile(d.t, d.dir).Register(context.Background(), rec); err != nil {
				d.t.Fatal(err)
			}
		},
		want: []want{{doctor.IDDiscoveryStale, "ghost", "remove " + "{dir}" + "/ghost.json"}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDeployment(t, nil)
			tc.build(d)
			cfg := d.config(func(c *doctor.Config) {
				if tc.doctor != nil {
					tc.doctor(d, c)
				}
			})
			rep := eventually(t, cfg, func(r *doctor.Report) bool {
				for _, w := range tc.want {
					if has(r, w.id, w.subject, doctor.Fail) == nil {
						return false
					}
				}
				return true
			})
			if !rep.Failed() {
				t.Fatal("a report with failing checks says it did not fail")
			}
			var text bytes.Buffer
			if err := rep.Text(&text); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				c := has(rep, w.id, w.subject, doctor.Fail)
				fix := strings.ReplaceAll(w.fix, "{dir}", d.dir)
				if !strings.Contains(c.Fix, fix) {
					t.Errorf("%s[%s] fix %q does not say %q", c.ID, c.Subject, c.Fix, fix)
				}
				if !strings.Contains(text.String(), "fix: "+c.Fix) {
					t.Errorf("the text report does not show %s's fix:\n%s", c.ID, text.String())
				}
			}
		})
	}
}

// TestFrontendAPIKey: with --protect-metrics the doctor needs the
// deployment's key, says so without it, and reads /metrics with it.
func TestFrontendAPIKey(t *testing.T) {
	const key = "doctor-test-key-0123456789"
	keys, err := httpapi.ParseAPIKeys([]byte(key + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := newDeployment(t, func(c *frontend.Config) { c.Frontend.APIKeys, c.Frontend.ProtectMetrics = keys, true })
	d.start("w0", "aggregated", nil)
	rep := eventually(t, d.config(nil), func(r *doctor.Report) bool { return has(r, doctor.IDFrontendMetrics, "", doctor.Fail) != nil })
	if c := has(rep, doctor.IDFrontendMetrics, "", doctor.Fail); !strings.Contains(c.Fix, "--api-key") {
		t.Fatalf("fix %q does not name --api-key", c.Fix)
	}
	eventually(t, d.config(func(c *doctor.Config) { c.APIKey = key }), func(r *doctor.Report) bool {
		return has(r, doctor.IDFrontendMetrics, "", doctor.OK) != nil
	})
	// A wrong key is refused like none.
	eventually(t, d.config(func(c *doctor.Config) { c.APIKey = key + "x" }), func(r *doctor.Report) bool {
		return has(r, doctor.IDFrontendMetrics, "", doctor.Fail) != nil
	})
}

// TestFrontendDown: nothing listening is one failing check with a fix,
// not an error.
func TestFrontendDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	rep, err := doctor.Run(context.Background(), doctor.Config{FrontendURL: "http://" + addr, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if c := has(rep, doctor.IDFrontendHealth, "", doctor.Fail); c == nil || c.Fix == "" {
		t.Fatalf("no failing %s check with a fix: %+v", doctor.IDFrontendHealth, rep.Checks)
	}
	if _, err := doctor.Run(context.Background(), doctor.Config{FrontendURL: "ftp://x"}); err == nil {
		t.Fatal("a non-HTTP frontend URL was accepted")
	}
}

func TestParseExpectation(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want doctor.Expectation
		bad  bool
	}{
		{in: "3", want: doctor.Expectation{N: 3}},
		{in: "m=2", want: doctor.Expectation{Model: "m", N: 2}},
		{in: "m/decode=2", want: doctor.Expectation{Model: "m", Role: discovery.RoleDecode, N: 2}},
		{in: "/prefill=1", want: doctor.Expectation{Role: discovery.RolePrefill, N: 1}},
		{in: "m/chef=1", bad: true},
		{in: "m/=1", bad: true},
		{in: "-1", bad: true},
		{in: "m=x", bad: true},
		{in: "99999999999999999999", bad: true},
	} {
		got, err := doctor.ParseExpectation(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && got != tc.want) {
			t.Errorf("ParseExpectation(%q) = %+v, %v", tc.in, got, err)
		}
	}
}

func FuzzParseExpectation(f *testing.F) {
	for _, s := range []string{"3", "m=2", "m/decode=2", "/prefill=1", "m/=1", "=", "", "a/b/c=1", "-0", "m=1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := doctor.ParseExpectation(s)
		if err != nil {
			return
		}
		if e.N < 0 || e.N > 1_000_000 {
			t.Fatalf("%q parsed to N=%d", s, e.N)
		}
		if e.Role != "" && e.Role != discovery.RoleAggregated && e.Role != discovery.RolePrefill && e.Role != discovery.RoleDecode {
			t.Fatalf("%q parsed to role %q", s, e.Role)
		}
	})
}
