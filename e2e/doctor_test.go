package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/control/doctor"
)

// TestDoctorCLI runs `tandem doctor` against a frontend and two worker
// processes, one started with --kv-events off, and one worker fewer than
// expected: the JSON report names both, and the exit is a failure. --probe
// sends its prompt through the CLI's client (with the key, over HTTPS in the
// secure mode) and the loopback frontend turns the leftover check on. In the
// secure mode (-secure) it passes the deployment's key, CA and
// a cluster certificate, as an operator would.
func TestDoctorCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 processes")
	}
	dir := t.TempDir()
	disc := " --discovery file --discovery-dir " + dir
	url := startProc(t, "frontend", "frontend --http-addr 127.0.0.1:0 --router-mode kv"+disc, frontendReady).line
	startProc(t, "w1", "worker --id w1 --deregister-delay 0s --metrics-addr 127.0.0.1:0"+disc, workerReady)
	startProc(t, "w2", "worker --id w2 --deregister-delay 0s --metrics-addr 127.0.0.1:0 --kv-events off"+disc, workerReady)
	args := []string{"doctor", "--frontend", url, "--output", "json", "--expect-workers", "3", "--probe", "--discovery", "file", "--discovery-dir", dir}
	if secure.on {
		args = append(args, "--api-key", testAPIKey, "--tls-ca", filepath.Join(secure.dir, "ca.crt"),
			"--mtls-ca", filepath.Join(secure.dir, "ca.crt"), "--mtls-cert", filepath.Join(secure.dir, "frontend-1.crt"),
			"--mtls-key", filepath.Join(secure.dir, "frontend-1.key"))
	}
	var rep doctor.Report
	deadline := time.Now().Add(30 * time.Second)
	for {
		var out, stderr bytes.Buffer
		cmd := exec.Command(tandemBin, args...)
		cmd.Stdout, cmd.Stderr = &out, &stderr
		err := cmd.Run()
		if err != nil && (exitCode(err) != 1 || !strings.Contains(stderr.String(), "doctor: checks failed")) {
			t.Fatalf("%v: %s", err, stderr.String())
		}
		rep = doctor.Report{}
		if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
			t.Fatalf("--output json: %v\n%s", jerr, out.String())
		}
		if err == nil {
			t.Fatalf("a failing report exited clean:\n%s", out.String())
		}
		got := map[string]doctor.Verdict{}
		for _, c := range rep.Checks {
			got[c.ID+"["+c.Subject+"]"] = c.Verdict
		}
		if got["kv_events[w2]"] == doctor.Fail && got["kv_events[w1]"] == doctor.OK && got["workers.expected[all=3]"] == doctor.Fail &&
			got["frontend.metrics[]"] == doctor.OK && len(rep.Find(doctor.IDWorkerMetrics, "")) == 0 &&
			len(rep.Find(doctor.IDProbeCache, "")) == 1 && len(rep.Find(doctor.IDFrontendTTFT, "")) == 1 && len(rep.Find(doctor.IDLeftovers, "")) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the report never named w2's events and the missing worker:\n%s", out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Either worker may serve the probe, so its verdict may go either way;
	// its requests must get through (the key, the CA).
	for _, c := range rep.Find(doctor.IDProbeCache, "") {
		if strings.HasPrefix(c.Summary, "probe request") || strings.HasPrefix(c.Summary, "no probe") {
			t.Errorf("the probe was not served: %s %q", c.Summary, c.Evidence)
		}
	}
	for _, c := range rep.Find(doctor.IDKVEvents, "w2") {
		if !strings.Contains(c.Fix, "--kv-events on") {
			t.Errorf("kv_events[w2] fix %q", c.Fix)
		}
	}
}
