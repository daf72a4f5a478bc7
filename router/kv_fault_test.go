package router

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestKVBoundPublishersComeAndGo is the fault suite of publishers dialing
// one bound socket (--kv-events-bind), over real ZMQ sockets: three
// publisher processes publish BlockStored batches without pause; each in
// turn is killed (SIGKILL or SIGTERM) and restarted. Every live publisher's applied events keep rising
// while another is gone, and the restarted one's resume within 5 s. The
// bound listener used to stop at the first disconnect, for every worker.
func TestKVBoundPublishersComeAndGo(t *testing.T) {
	f := newKVFixture(t, false, 0, func(c *KVConfig) {
		c.Bind, c.KVEventsTimeout, c.RebuildWindow = "tcp://127.0.0.1:0", time.Minute, 300*time.Millisecond
	})
	ids := []string{"w0", "w1", "w2"}
	for _, id := range ids {
		if err := f.kv.AddWorker(id, BoundPrefix+id, "", tbs); err != nil {
			t.Fatal(err)
		}
	}
	ep := f.fol.Listener().Endpoint()
	// Each publisher is a process: this test binary run as one
	// (TestMain, publisherEnv). Killing it is a process dying, alternately
	// by SIGKILL (no goodbye: the kernel closes its connection) and by
	// SIGTERM (it closes its socket, as a stopped vLLM does).
	type pub struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		done  chan struct{}
	}
	pubs := make([]*pub, len(ids))
	base := uint64(0)
	start := func(i int) {
		base += 1 << 20
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d", publisherEnv, ep, ids[i], base))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe() // closed by the test: the process exits
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pb := &pub{cmd: cmd, stdin: stdin, done: make(chan struct{})}
		go func() {
			_ = cmd.Wait()
			close(pb.done)
		}()
		pubs[i] = pb
	}
	kills := 0
	kill := func(i int) {
		sig := os.Signal(syscall.SIGKILL)
		if kills%2 == 1 {
			sig = syscall.SIGTERM
		}
		kills++
		_ = pubs[i].cmd.Process.Signal(sig)
		select {
		case <-pubs[i].done:
		case <-time.After(10 * time.Second):
			_ = pubs[i].cmd.Process.Kill()
			t.Fatalf("publisher %s did not exit on %v", ids[i], sig)
		}
		pubs[i].stdin.Close()
	}
	for i := range ids {
		start(i)
	}
	t.Cleanup(func() {
		for i := range pubs {
			select {
			case <-pubs[i].done:
			default:
				_ = pubs[i].cmd.Process.Kill()
				<-pubs[i].done
			}
			pubs[i].stdin.Close()
		}
	})
	applied := func(id string) uint64 { return f.kv.EventStats()[id].Applied }
	// rising waits until every worker in live has applied more than it
	// had, within limit.
	rising := func(what string, live []int, limit time.Duration) {
		t.Helper()
		from := map[int]uint64{}
		for _, i := range live {
			from[i] = applied(ids[i])
		}
		deadline := time.Now().Add(limit)
		for {
			ok := true
			for _, i := range live {
				if applied(ids[i]) <= from[i]+5 {
					ok = false
				}
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: applied events did not rise within %v: %v (health %v)", what, limit, f.kv.EventStats(), f.kv.Health())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	rising("start", []int{0, 1, 2}, 10*time.Second)
	for _, gone := range []int{0, 1, 2, 1} {
		kill(gone)
		var others []int
		for i := range ids {
			if i != gone {
				others = append(others, i)
			}
		}
		rising(fmt.Sprintf("%s killed", ids[gone]), others, 5*time.Second)
		rising(fmt.Sprintf("%s killed, still", ids[gone]), others, 5*time.Second)
		start(gone)
		rising(fmt.Sprintf("%s restarted", ids[gone]), []int{0, 1, 2}, 5*time.Second)
	}
	metric := func(name string) float64 {
		fams, err := f.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range fams {
			if mf.GetName() == name && len(mf.Metric) == 1 {
				if g := mf.Metric[0].GetGauge(); g != nil {
					return g.GetValue()
				}
				return mf.Metric[0].GetCounter().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	if n := metric("tandem_kvevents_bound_publishers"); n != 3 {
		t.Fatalf("%v publishers connected, want 3", n)
	}
	if n := metric("tandem_kvevents_bound_disconnects_total"); n < 4 {
		t.Fatalf("%v disconnects counted, want at least 4", n)
	}
	// A restarted publisher's first batches, published while its
	// connection was being made, are lost (no replay socket here): its
	// worker rebuilds for RebuildWindow, then every worker is healthy.
	deadline := time.Now().Add(5 * time.Second)
	for _, id := range ids {
		for f.kv.Health()[id] != "healthy" {
			if time.Now().After(deadline) {
				t.Fatalf("%s is %s after the restarts", id, f.kv.Health()[id])
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
