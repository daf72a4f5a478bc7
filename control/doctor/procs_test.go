package doctor_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/control/doctor"
)

// TestMain lets the test binary run as a listening helper process
// (DOCTOR_TEST_LISTEN=N: listen on N loopback ports, print them, wait for
// stdin to close), the stand-in for a tandem process on the host.
func TestMain(m *testing.M) {
	if n, err := strconv.Atoi(os.Getenv("DOCTOR_TEST_LISTEN")); err == nil {
		var addrs []string
		for range n {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			defer l.Close()
			addrs = append(addrs, l.Addr().String())
		}
		fmt.Println(strings.Join(addrs, " "))
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the test ends
		return
	}
	os.Exit(m.Run())
}

// listener starts a helper process named name (its argv[0]) listening on
// n ports, and returns its pid and addresses.
func listener(t *testing.T, name string, n int) (int, []string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Args[0] = name
	cmd.Env = append(os.Environ(), "DOCTOR_TEST_LISTEN="+strconv.Itoa(n))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		return cmd.Process.Pid, strings.Fields(l)
	case <-time.After(20 * time.Second):
		t.Fatal("the helper process printed no addresses")
	}
	return 0, nil
}

// TestLeftovers: on the deployment's host, a process named like Tandem's
// that listens on ports no record names is reported with its pid and the
// command to stop it; one whose port a record names is not.
func TestLeftovers(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "tandem-doctor-test-" + hex.EncodeToString(b[:]) // no other process on the host is named so
	d := newDeployment(t, nil)
	d.start("w0", "aggregated", nil)
	// A registered worker's process: its record names one of its ports.
	known, kaddrs := listener(t, name, 2)
	rec := d.ws["w0"].Record()
	rec.ID, rec.RequestPlane, rec.MetricsAddr, rec.KVEvents = "w-known", kaddrs[0], "", discovery.KVEvents{}
	if _, err := newFile(t, d.dir).Register(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	cfg := d.config(func(c *doctor.Config) { c.SameHost, c.ProcessNames = "on", []string{name} })
	rep := eventually(t, cfg, func(r *doctor.Report) bool { return has(r, doctor.IDLeftovers, "", doctor.OK) != nil })
	if c := has(rep, doctor.IDLeftovers, "", doctor.OK); !strings.Contains(strings.Join(c.Evidence, "\n"), "1 "+name+" processes") {
		t.Errorf("the healthy check did not see the known process %d: %q", known, c.Evidence)
	}

	// A leftover: nothing names its port.
	odd, oaddrs := listener(t, name, 1)
	rep = eventually(t, cfg, func(r *doctor.Report) bool { return has(r, doctor.IDLeftovers, "", doctor.Warn) != nil })
	c := has(rep, doctor.IDLeftovers, "", doctor.Warn)
	if want := fmt.Sprintf("kill -TERM %d ", odd); !strings.Contains(c.Fix+" ", want) {
		t.Errorf("fix %q does not say %q", c.Fix, want)
	}
	ev := strings.Join(c.Evidence, "\n")
	if !strings.Contains(ev, fmt.Sprintf("pid %d listens on %s", odd, oaddrs[0])) || strings.Contains(ev, fmt.Sprintf("pid %d ", known)) {
		t.Errorf("evidence names the wrong processes (leftover %d on %s, known %d):\n%s", odd, oaddrs[0], known, ev)
	}

	// Off: no check at all; auto on a loopback frontend: on.
	cfg.SameHost = "off"
	if r, err := doctor.Run(context.Background(), cfg); err != nil || len(r.Find(doctor.IDLeftovers, "")) != 0 {
		t.Errorf("same-host off still checked: %v", err)
	}
	cfg.SameHost = "auto"
	if r, err := doctor.Run(context.Background(), cfg); err != nil || len(r.Find(doctor.IDLeftovers, "")) != 1 {
		t.Errorf("same-host auto on a loopback frontend did not check: %v", err)
	}
	cfg.SameHost = "sometimes"
	if _, err := doctor.Run(context.Background(), cfg); err == nil {
		t.Error("same-host mode sometimes was accepted")
	}
}
