package doctor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/control/doctor"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/nodes/frontend"
	"github.com/tandemllm/tandem/nodes/worker"
)

// slowPrefill makes a worker's prefill cost 0.1 ms a new token on the
// wall clock (a 600-token miss about 60 ms, a hit about 1 ms), so that a
// cache hit is plainly faster even on a loaded machine.
func slowPrefill(mc *mocker.Config, _ *worker.Config) {
	mc.Speedup = 1
	mc.Timing = mocker.TimingModel{PrefillB: 0.1, PrefillC: 0.5, DecodeC: 0.5, DecodeMin: 0.5}
}

// TestProbe: --probe on a KV-routed deployment sees the re-sent prompt's
// blocks cached and its TTFT lower, and measures the TTFT the frontend
// adds; a worker with its prefix cache off fails with the fix; a frontend
// that adds more than the threshold warns.
func TestProbe(t *testing.T) {
	cases := []struct {
		name    string
		mocker  func(*mocker.Config, *worker.Config)
		fe      func(*frontend.Config)
		doctor  func(*doctor.Config)
		id      string
		verdict doctor.Verdict
		says    string // part of the fix (or of the summary when ok)
	}{
		{name: "healthy cache", mocker: slowPrefill, id: doctor.IDProbeCache, verdict: doctor.OK, says: "cached on the re-send"},
		{name: "healthy frontend ttft", mocker: slowPrefill, id: doctor.IDFrontendTTFT, verdict: doctor.OK, says: "the frontend adds"},
		{name: "prefix cache off", mocker: func(mc *mocker.Config, wc *worker.Config) {
			slowPrefill(mc, wc)
			mc.DisablePrefixCaching = true
		}, id: doctor.IDProbeCache, verdict: doctor.Fail, says: "--router-mode kv"},
		{name: "round robin over two workers", fe: func(c *frontend.Config) { c.RouterMode = "round-robin" },
			mocker: slowPrefill, id: doctor.IDProbeCache, verdict: doctor.Fail, says: "--router-mode kv"},
		// The frontend's own work on loopback is well over 1 µs: the
		// threshold, not a slowed frontend, is the injected failure.
		{name: "frontend adds over the threshold", mocker: slowPrefill, doctor: func(c *doctor.Config) { c.MaxFrontendTTFT = time.Microsecond },
			id: doctor.IDFrontendTTFT, verdict: doctor.Warn, says: "queueing in the frontend"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDeployment(t, tc.fe)
			d.start("w0", "aggregated", tc.mocker)
			if tc.fe != nil {
				d.start("w1", "aggregated", tc.mocker)
			}
			cfg := d.config(func(c *doctor.Config) {
				c.Probe = true
				if tc.doctor != nil {
					tc.doctor(c)
				}
			})
			rep := eventually(t, cfg, func(r *doctor.Report) bool { return has(r, tc.id, d.model.Name, tc.verdict) != nil })
			c := has(rep, tc.id, d.model.Name, tc.verdict)
			t.Logf("%s %s: %s\n%s", c.Verdict, c.ID, c.Summary, strings.Join(c.Evidence, "\n"))
			text := c.Fix
			if tc.verdict == doctor.OK {
				text = c.Summary
			}
			if !strings.Contains(text, tc.says) {
				t.Errorf("%s: %q does not say %q", c.ID, text, tc.says)
			}
			if tc.id == doctor.IDProbeCache && !strings.Contains(strings.Join(c.Evidence, "\n"), "not user data") {
				t.Errorf("the evidence does not say the prompt is synthetic: %q", c.Evidence)
			}
			if tc.id == doctor.IDFrontendTTFT && len(c.Evidence) != 2 {
				t.Errorf("want one evidence line per send: %q", c.Evidence)
			}
		})
	}
}

// TestProbeOptIn: without Probe no request is sent and no probe check
// appears.
func TestProbeOptIn(t *testing.T) {
	d := newDeployment(t, nil)
	d.start("w0", "aggregated", nil)
	rep := eventually(t, d.config(nil), func(r *doctor.Report) bool { return len(r.Find(doctor.IDKVEvents, "")) == 1 })
	if len(rep.Find(doctor.IDProbeCache, "")) > 0 || len(rep.Find(doctor.IDFrontendTTFT, "")) > 0 {
		t.Fatalf("probe checks without Probe: %+v", rep.Checks)
	}
}
