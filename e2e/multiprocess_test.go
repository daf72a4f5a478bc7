package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/internal/etcdtest"
)

// osProc is a tandem subcommand running as its own OS process (the
// binary TestMain built).
type osProc struct {
	name string
	cmd  *exec.Cmd
	log  string // its stderr, kept for failures
	line string // the banner line waited for
	wait chan error
}

// startProc starts `tandem args` (with env added to the test's
// environment) and waits for a stdout line matching ready; it returns the
// first submatch.
func startProc(t *testing.T, name, args string, ready *regexp.Regexp, env ...string) *osProc {
	t.Helper()
	return startProcWith(t, name, args, ready, nil, env...)
}

// startProcWith is startProc with the process started through wrap (e.g.
// "ip netns exec NS").
func startProcWith(t *testing.T, name, args string, ready *regexp.Regexp, wrap []string, env ...string) *osProc {
	t.Helper()
	skipShort(t)
	logPath := filepath.Join(t.TempDir(), name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	argv := append(append(slices.Clone(wrap), tandemBin), strings.Fields(secureArgs(args))...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = logf
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &osProc{name: name, cmd: cmd, log: logPath, wait: make(chan error, 1)}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.wait
		logf.Close()
		if b, _ := os.ReadFile(logPath); bytes.Contains(b, []byte("WARNING: DATA RACE")) {
			// A subprocess's race report goes to its stderr, not to the test.
			i := bytes.Index(b, []byte("WARNING: DATA RACE"))
			t.Errorf("%s: data race:\n%s", name, b[i:min(len(b), i+4000)])
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if i := bytes.Index(b, []byte("panic")); i >= 0 {
				t.Logf("--- %s panicked ---\n%s", name, b[i:min(len(b), i+3000)])
			}
			t.Logf("--- %s stderr ---\n%s", name, tailBytes(b, 4000))
		}
	})
	lines := make(chan string, 16)
	go func() {
		br := bufio.NewReader(stdout)
		for {
			l, err := br.ReadString('\n')
			if l != "" {
				select {
				case lines <- l:
				default:
				}
			}
			if err != nil {
				close(lines)
				break
			}
		}
		p.wait <- cmd.Wait()
	}()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				b, _ := os.ReadFile(logPath)
				t.Fatalf("%s exited before it was ready:\n%s", name, tailBytes(b, 4000))
			}
			if m := ready.FindStringSubmatch(l); m != nil {
				p.line = m[len(m)-1]
				go func() {
					for range lines {
					}
				}()
				return p
			}
		case <-deadline:
			t.Fatalf("%s not ready within 60s", name)
		}
	}
}

func tailBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

var (
	frontendReady = regexp.MustCompile(`url:\s+(https?://\S+)/v1`)
	workerReady   = regexp.MustCompile(`request-plane:\s+(\S+)`)
)

// outcome is one client request under load.
type outcome struct {
	worker     string
	status     int
	started    bool // a content chunk arrived before any error
	cut        bool // the stream ended with an error event
	err        error
	start, end time.Time
}

func sendOne(c *http.Client, url, prompt string, maxTokens int) outcome {
	body := fmt.Sprintf(`{"model":"tandem-mock","prompt":%q,"max_tokens":%d,"ignore_eos":true,"stream":true}`, prompt, maxTokens)
	resp, err := c.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return outcome{err: err}
	}
	defer resp.Body.Close()
	o := outcome{worker: resp.Header.Get("X-Tandem-Worker"), status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		o.err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
		return o
	}
	br := bufio.NewReader(resp.Body)
	done := false
	for {
		line, err := br.ReadBytes('\n')
		switch {
		case bytes.HasPrefix(line, []byte(`data: {"error"`)):
			o.cut = true
		case bytes.HasPrefix(line, []byte(`data: [DONE]`)):
			done = true
		case bytes.HasPrefix(line, []byte(`data: {`)) && bytes.Contains(line, []byte(`"text":"`)) && !o.cut:
			o.started = true
		}
		if err != nil {
			break
		}
	}
	if !done {
		o.err = fmt.Errorf("stream from %s ended without [DONE]", o.worker)
	}
	return o
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// healthWorkers lists the workers /health reports.
func healthWorkers(t *testing.T, url string) []string {
	t.Helper()
	var h struct {
		Workers []struct{ ID string } `json:"workers"`
	}
	if err := json.Unmarshal([]byte(getBody(t, url+"/health")), &h); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, w := range h.Workers {
		ids = append(ids, w.ID)
	}
	slices.Sort(ids)
	return ids
}

func metricSum(body, name string) float64 {
	sum := 0.0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// startLoad runs clients closed-loop streaming clients against url, each
// sending request n with the prompt and max_tokens that next(client, n)
// gives, until the returned stop is called; stop returns every outcome.
func startLoad(url string, clients int, next func(client, n int) (string, int)) (stop func() []outcome) {
	var (
		mu       sync.Mutex
		outcomes []outcome
		wg       sync.WaitGroup
	)
	done := make(chan struct{})
	hc := &http.Client{Transport: testTransport(clients)}
	for i := range clients {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				prompt, maxTokens := next(i, n)
				start := time.Now()
				o := sendOne(hc, url, prompt, maxTokens)
				o.start, o.end = start, time.Now()
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
				if o.err != nil && !o.started {
					time.Sleep(20 * time.Millisecond) // an outage: don't spin
				}
			}
		})
	}
	return func() []outcome {
		close(done)
		wg.Wait()
		return outcomes
	}
}

// TestMultiProcessFailover starts 1 frontend and 3 workers as separate OS
// processes under each discovery backend, sends streaming load, kills one
// worker with SIGKILL mid-load, and checks that every request that had not
// started streaming succeeded (retried on another worker), that streams
// already under way on the dead worker ended with an error event, and that
// the dead worker left the router and the KV index.
func TestMultiProcessFailover(t *testing.T) {
	longParallel(t)
	etcd := func(t *testing.T) string {
		return "--discovery etcd --etcd-endpoints " + etcdtest.Start(t).Endpoint() + " --lease-ttl 2s"
	}
	cases := []struct {
		name string
		// flags returns the flags of the frontend and of the workers.
		flags func(t *testing.T) (frontend, workers string)
		// kube: the real API server where the workers are pods.
		kube bool
	}{
		{name: "file", flags: func(t *testing.T) (string, string) {
			d := "--discovery file --discovery-dir " + t.TempDir() + " --lease-ttl 2s"
			return d, d
		}},
		{name: "etcd", flags: func(t *testing.T) (string, string) { d := etcd(t); return d, d }},
		{name: "etcd+nats", flags: func(t *testing.T) (string, string) {
			d, addr := etcd(t), freeAddr(t)
			return d + " --event-plane nats --nats embedded --nats-addr " + addr,
				d + " --event-plane nats --nats nats://" + addr
		}},
		{name: "kube", kube: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var kc *kubeCluster
			var feFlags, disc string
			if c.kube {
				// Skips when the kube-apiserver binary is absent.
				kc = startKubeCluster(t, []string{"w1", "w2", "w3"})
				feFlags, disc = kc.frontendFlags, kc.workerFlags
			} else {
				feFlags, disc = c.flags(t)
			}
			fe := startProc(t, "frontend", "frontend --http-addr 127.0.0.1:0 --router-mode kv --max-retries 3 --drain-timeout 2s "+feFlags, frontendReady)
			url := fe.line
			if c.kube {
				// No worker yet: the model stays advertised, and a request
				// is a 503 with Retry-After, not a 404.
				kc.checkNoWorker(t, url)
			}
			workers := map[string]*osProc{}
			ids := []string{"w1", "w2", "w3"}
			for _, id := range ids {
				// The kube backend keys records by pod (POD_NAME, from the
				// downward API in a real pod).
				workers[id] = startProc(t, id, "worker --id "+id+" --speedup 4 --deregister-delay 0s "+disc, workerReady, "POD_NAME="+id)
			}
			deadline := time.Now().Add(20 * time.Second)
			for !slices.Equal(healthWorkers(t, url), ids) {
				if time.Now().After(deadline) {
					t.Fatalf("frontend sees %v, want %v", healthWorkers(t, url), ids)
				}
				time.Sleep(50 * time.Millisecond)
			}

			const clients = 24
			stop := startLoad(url, clients, func(i, n int) (string, int) {
				// Shared prefixes per client, so the kv router has
				// something to follow.
				return fmt.Sprintf("client %d shares this long system prompt with its own earlier requests; question %d", i%6, n), 40 + (i*7)%60
			})
			time.Sleep(1500 * time.Millisecond)
			victim := "w2"
			if err := workers[victim].cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			if c.kube {
				// The kubelet sees the container die and marks the pod
				// not ready; meanwhile the frontend's retries carry the load.
				kc.markReady(t, victim, false)
			}
			var left time.Duration
			for {
				if !slices.Contains(healthWorkers(t, url), victim) {
					left = time.Since(killed)
					break
				}
				if time.Since(killed) > 10*time.Second {
					t.Fatalf("%s still listed 10s after SIGKILL", victim)
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(1500 * time.Millisecond) // load on the two survivors
			outcomes := stop()

			var ok, cut, failed int
			perWorker := map[string]int{}
			for _, o := range outcomes {
				perWorker[o.worker]++
				switch {
				case o.cut && o.started && o.worker == victim:
					cut++ // under way on the dead worker: an error event is the contract
				case o.err != nil || o.cut:
					failed++
					t.Errorf("request failed (worker %q, status %d, started %v, cut %v): %v", o.worker, o.status, o.started, o.cut, o.err)
				default:
					ok++
				}
			}
			metrics := getBody(t, url+"/metrics")
			retries := metricSum(metrics, "tandem_frontend_retries_total")
			t.Logf("%s discovery: %d requests: %d succeeded, %d streams cut on %s, %d failed; %v retries; %s left the router %v after SIGKILL; per worker %v",
				c.name, len(outcomes), ok, cut, victim, failed, retries, victim, left.Round(time.Millisecond), perWorker)
			if ok < clients {
				t.Fatalf("only %d requests succeeded", ok)
			}
			// The dead worker left the KV index and its per-worker series.
			if strings.Contains(metrics, `worker="`+victim+`"`) {
				var lines []string
				for _, l := range strings.Split(metrics, "\n") {
					if strings.Contains(l, `worker="`+victim+`"`) && !strings.HasPrefix(l, "tandem_router_decisions_total") {
						lines = append(lines, l)
					}
				}
				if len(lines) > 0 {
					t.Errorf("metrics still carry the dead worker:\n%s", strings.Join(lines, "\n"))
				}
			}
			for _, id := range []string{"w1", "w3"} {
				if !strings.Contains(metrics, `tandem_router_kv_event_health{state="healthy",worker="`+id+`"} 1`) {
					t.Errorf("kv events of %s not healthy:\n%s", id, grepLines(metrics, "tandem_router_kv_event_health"))
				}
			}

			// SIGTERM on a survivor: it deregisters, and exits 0.
			w3 := workers["w3"]
			if err := w3.cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-w3.wait:
				if err != nil {
					t.Fatalf("w3 exit: %v", err)
				}
				w3.wait <- nil // for the cleanup
			case <-time.After(15 * time.Second):
				t.Fatal("w3 did not exit after SIGINT")
			}
			deadline = time.Now().Add(5 * time.Second)
			for !slices.Equal(healthWorkers(t, url), []string{"w1"}) {
				if time.Now().After(deadline) {
					t.Fatalf("after w3 drained, frontend sees %v", healthWorkers(t, url))
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// freeAddr returns a loopback address for a child process to listen on
// (one the test must know in advance, as a frontend restarted at the same
// address). The port is released before the child binds it, so it comes
// from below the kernel's ephemeral range: there no other test's ":0"
// listener and no outgoing connection's source port can take it in the
// meantime, which on a busy shared machine they do.
func freeAddr(t *testing.T) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 2048 && n <= 65535 {
				low = n
			}
		}
	}
	span := min(low-1024, 12000)
	for range 100 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(low-1-rand.IntN(span)))
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
