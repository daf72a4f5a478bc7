package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tandemllm/tandem/dispatch"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
)

// errParam reads an OpenAI error body's param.
func errParam(t *testing.T, resp *http.Response) (param, code string) {
	t.Helper()
	var body struct {
		Error struct {
			Param *string `json:"param"`
			Code  *string `json:"code"`
		} `json:"error"`
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("not an OpenAI error body: %s", b)
	}
	if body.Error.Param != nil {
		param = *body.Error.Param
	}
	if body.Error.Code != nil {
		code = *body.Error.Code
	}
	return param, code
}

// Finding 1 of issue 12: max_tokens of 2^63-1 overflowed the context check
// and wedged a worker; a request without max_tokens generated to the full
// context.
func TestMaxTokensRangeAndDefault(t *testing.T) {
	eng := &enginetest.Scripted{Name: "m", Output: toks("x"), Ctx: 32768}
	cfg := DefaultConfig()
	cfg.MaxTokensDefault = 64
	cfg.MaxTokensLimit = 1000
	f := newFixtureCfg(t, cfg, 32768, map[string]engine.Generator{"w0": eng})
	for _, tc := range []struct {
		body   string
		status int
		param  string
	}{
		{`{"model":"m","prompt":"hi","max_tokens":9223372036854775807}`, 400, "max_tokens"},
		{`{"model":"m","prompt":"hi","max_completion_tokens":9223372036854775807}`, 400, "max_completion_tokens"},
		{`{"model":"m","prompt":"hi","max_tokens":1001}`, 400, "max_tokens"},
		{`{"model":"m","prompt":"hi","min_tokens":9223372036854775807}`, 400, "min_tokens"},
		{`{"model":"m","prompt":"hi","stop_token_ids":[999999999]}`, 400, "stop_token_ids[0]"},
		{`{"model":"m","prompt":[5,999999999]}`, 400, "prompt[1]"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":9223372036854775807}`, 400, "max_tokens"},
	} {
		url := f.url + "/v1/completions"
		if strings.Contains(tc.body, "messages") {
			url = f.url + "/v1/chat/completions"
		}
		resp := post(t, url, tc.body)
		if resp.StatusCode != tc.status {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s: status %d, want %d: %s", tc.body, resp.StatusCode, tc.status, b)
		}
		if p, _ := errParam(t, resp); p != tc.param {
			t.Errorf("%s: param %q, want %q", tc.body, p, tc.param)
		}
	}
	if n := len(eng.Requests()); n != 0 {
		t.Fatalf("the engine saw %d refused requests", n)
	}
	resp := post(t, f.url+"/v1/completions", `{"model":"m","prompt":"hi"}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := eng.Requests()[0].MaxTokens; got != 64 {
		t.Fatalf("no max_tokens: the engine was asked for %d tokens, want the default cap 64", got)
	}
}

// Finding 2 of issue 12: a body that says it is not JSON is refused.
func TestContentTypeRefused(t *testing.T) {
	f := newFixture(t, 4096, map[string]engine.Generator{"w0": &enginetest.Scripted{Name: "m", Output: toks("x")}})
	for ct, want := range map[string]int{"text/plain": 415, "application/x-www-form-urlencoded": 415, "application/json; charset=utf-8": 200} {
		resp := post(t, f.url+"/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`, "Content-Type", ct)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Content-Type %s: status %d, want %d", ct, resp.StatusCode, want)
		}
	}
}

// blocking holds every sequence until released, then emits one token.
type blocking struct {
	mu      sync.Mutex
	release chan struct{}
	started chan struct{}
}

func newBlocking() *blocking {
	return &blocking{release: make(chan struct{}), started: make(chan struct{}, 64)}
}

func (b *blocking) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	p := engine.NewPipe(ctx)
	b.started <- struct{}{}
	go func() {
		select {
		case <-b.release:
			p.Send(engine.Delta{Tokens: []engine.Token{'x'}, Finish: engine.FinishLength, PromptTokens: len(req.Prompt)})
		case <-ctx.Done():
			p.Fail(ctx.Err())
		}
	}()
	return p, nil
}

// Finding 4 of issue 12: past --max-inflight and --max-queue a request is a
// 429 with Retry-After at once, /health says the model is saturated, and
// the diagnostic clears when the queue drains.
func TestAdmissionControl(t *testing.T) {
	eng := newBlocking()
	cfg := DefaultConfig()
	cfg.MaxInflight, cfg.MaxQueue, cfg.QueueTimeout = 2, 1, 5*time.Second
	f := newFixtureCfg(t, cfg, 4096, map[string]engine.Generator{"w0": eng})
	body := `{"model":"m","prompt":"hi","max_tokens":1}`
	var wg sync.WaitGroup
	statuses := make(chan int, 3)
	for range 3 {
		wg.Go(func() {
			resp := post(t, f.url+"/v1/completions", body)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses <- resp.StatusCode
		})
	}
	<-eng.started
	<-eng.started // two in flight; the third waits in the queue
	deadline := time.Now().Add(5 * time.Second)
	for {
		var h healthReport
		json.Unmarshal([]byte(getHealth(t, f.url)), &h)
		if len(h.Models) == 1 && h.Models[0].Queued == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("third request never queued: %+v", h.Models)
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	resp := post(t, f.url+"/v1/completions", body)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("past the queue: status %d Retry-After %q, want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if _, code := errParam(t, resp); code != "rate_limit_exceeded" {
		t.Fatalf("code %q", code)
	}
	// Immediate means not after the 5 s queue timeout; 2.5 s leaves a
	// loaded machine room and still tells the two apart.
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Fatalf("the refusal took %v; it must be immediate", d)
	} else {
		t.Logf("past the limit and the queue: 429 in %v", d.Round(time.Microsecond))
	}
	var h healthReport
	json.Unmarshal([]byte(getHealth(t, f.url)), &h)
	if h.Status != "degraded" || !h.Models[0].Saturated || !f.board.IsActive(DiagSaturated, "m") {
		t.Fatalf("health while saturated: %+v", h)
	}
	if !strings.Contains(metricsText(t, f.url), `tandem_frontend_admission_rejected_total{model="m",reason="queue_full"} 1`) {
		t.Fatal("no admission metric")
	}
	close(eng.release)
	wg.Wait()
	close(statuses)
	for st := range statuses {
		if st != 200 {
			t.Fatalf("an admitted request got %d", st)
		}
	}
	json.Unmarshal([]byte(getHealth(t, f.url)), &h)
	if h.Status != "ok" || h.Models[0].Saturated || h.Models[0].Inflight != 0 || f.board.IsActive(DiagSaturated, "m") {
		t.Fatalf("health after the queue drained: %+v", h)
	}
}

func getHealth(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func metricsText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// limitedServer serves f's frontend through NewHTTPServer on a loopback
// port, as tandem serve does.
func limitedServer(t *testing.T, f *fixture) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, l := f.srv.NewHTTPServer(lis)
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return lis.Addr().String()
}

// Finding 3 of issue 12: connections past the cap get a 503 at once (file
// descriptors stay for /health), and slots free up when clients leave.
func TestConnectionCap(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HTTP.MaxConns, cfg.HTTP.ProbeConns = 2, 0 // TestProbeReserve: with a reserve
	f := newFixtureCfg(t, cfg, 4096, map[string]engine.Generator{"w0": &enginetest.Scripted{Name: "m", Output: toks("x")}})
	addr := limitedServer(t, f)
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	time.Sleep(50 * time.Millisecond) // both accepted
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil || !strings.Contains(line, "503") {
		t.Fatalf("third connection: %q %v, want a 503", line, err)
	}
	if !f.board.IsActive(DiagConnCap, "http") {
		t.Fatalf("no %s diagnostic: %+v", DiagConnCap, f.board.Active())
	}
	held[0].Close()
	waitOK(t, "http://"+addr+"/health")
	held[1].Close()
	waitOK(t, "http://"+addr+"/live")
	http.DefaultClient.CloseIdleConnections()
	for deadline := time.Now().Add(5 * time.Second); f.board.IsActive(DiagConnCap, "http"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the connection-cap diagnostic did not clear once connections closed")
		}
	}
	if m := metricsText(t, "http://"+addr); !regexp.MustCompile(`(?m)^tandem_frontend_connections_refused_total [1-9]`).MatchString(m) {
		t.Fatalf("no refusal metric:\n%.400s", m)
	}
}

// waitOK polls url until it answers 200 (a closed connection frees its
// slot once the server notices).
func waitOK(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered 200: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Finding 3 of issue 12: a silent connection is closed by the header
// timeout, an idle keep-alive one by the idle timeout.
func TestHeaderAndIdleTimeouts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HTTP.ReadHeaderTimeout, cfg.HTTP.IdleTimeout = 200*time.Millisecond, 200*time.Millisecond
	f := newFixtureCfg(t, cfg, 4096, map[string]engine.Generator{"w0": &enginetest.Scripted{Name: "m", Output: toks("x")}})
	addr := limitedServer(t, f)
	for name, send := range map[string]string{
		"silent":     "",
		"half-sent":  "GET /health HTTP/1.1\r\nHost: x\r\n",
		"keep-alive": "GET /live HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, send)
		start := time.Now()
		// The server closes it 200 ms in; the client's own deadline is
		// far beyond, so a loaded machine cannot pass one for the other.
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err = io.Copy(io.Discard, c) // until the server closes
		c.Close()
		if err != nil || time.Since(start) > 20*time.Second {
			t.Errorf("%s connection: not closed by the server (%v after %v)", name, err, time.Since(start))
		}
	}
}

// Finding 3 of issue 12: request bodies in memory share one budget, so slow
// clients with large bodies get 503s instead of taking the memory; the
// budget comes back when they leave.
func TestBodyBudget(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HTTP.BodyBudget = 1 << 20
	f := newFixtureCfg(t, cfg, 4096, map[string]engine.Generator{"w0": &enginetest.Scripted{Name: "m", Output: toks("x")}})
	addr := limitedServer(t, f)
	slow := func(n int) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"model\":", n)
		return c
	}
	a := slow(700 << 10) // holds 700 KiB of the budget while it dribbles
	// Polled, not a fixed 100 ms: on a loaded machine a's handler may not
	// have reserved its share yet, and b would take the budget first.
	for deadline := time.Now().Add(10 * time.Second); f.srv.budget.used.Load() < 700<<10; {
		if time.Now().After(deadline) {
			t.Fatalf("the first body reserved %d B of the budget, want 700 KiB", f.srv.budget.used.Load())
		}
		time.Sleep(time.Millisecond)
	}
	b := slow(700 << 10)
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(b).ReadString('\n')
	b.Close()
	if err != nil || !strings.Contains(line, "503") {
		t.Fatalf("second large body: %q %v, want 503", line, err)
	}
	if !f.board.IsActive(DiagBodyBudget, "http") {
		t.Fatalf("no %s diagnostic", DiagBodyBudget)
	}
	a.Close()
	deadline := time.Now().Add(5 * time.Second)
	for f.srv.budget.used.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("budget not returned: %d bytes held", f.srv.budget.used.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hi","max_tokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after the slow clients left: %d", resp.StatusCode)
	}
	if f.board.IsActive(DiagBodyBudget, "http") {
		t.Fatal("the body-budget diagnostic did not clear once the budget was free")
	}
}

// The read timeout bounds reading the request, never the stream after it.
func TestReadTimeoutSparesStreams(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HTTP.ReadTimeout = 200 * time.Millisecond
	eng := &enginetest.Scripted{Name: "m", Output: toks("x"), Delay: 50 * time.Millisecond}
	f := newFixtureCfg(t, cfg, 4096, map[string]engine.Generator{"w0": eng})
	addr := limitedServer(t, f)
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"m","prompt":"hi","max_tokens":10,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"finish_reason":"length"`) || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Fatalf("a 500 ms stream under a 200 ms read timeout was cut:\n%s", b)
	}
}

// Finding 3 of issue 12: a client that stops reading a stream is cut after
// the write-idle timeout, and its sequence stops, instead of holding a
// handler, a connection and an engine slot forever.
func TestWriteIdleTimeoutCutsStalledReader(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HTTP.WriteIdleTimeout = 200 * time.Millisecond
	cfg.MaxTokensDefault = 0
	eng := &enginetest.Scripted{Name: "m", Output: toks("abcdefgh"), Ctx: 1 << 20}
	f := newFixtureCfg(t, cfg, 1<<20, map[string]engine.Generator{"w0": eng})
	// Small socket buffers on both sides, so that a megabyte of stream
	// cannot hide in the kernel.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, l := f.srv.NewHTTPServer(smallSendBuf{lis})
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	addr := lis.Addr().String()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"model":"m","prompt":"hi","max_tokens":1000000,"stream":true}`
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// Never read. The server's writes block once the socket buffers fill;
	// the handler must give up, releasing its admission slot.
	adm := f.srv.model("m").adm
	deadline := time.Now().Add(10 * time.Second)
	for eng.Started.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stream never started")
		}
		time.Sleep(time.Millisecond)
	}
	for {
		if inflight, _, _ := adm.state(); inflight == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the handler of a stalled reader still runs")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type smallSendBuf struct{ net.Listener }

func (l smallSendBuf) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// A worker that takes a request and sends no first token (stopped, wedged)
// is given up on after --first-token-timeout: the request moves to another
// worker, or gets a 504 when there is none; it never waits forever.
func TestFirstTokenTimeout(t *testing.T) {
	cfg := dispatch.DefaultConfig()
	cfg.FirstTokenTimeout = 200 * time.Millisecond
	stalled := newBlocking()
	f := newFixtureDispatch(t, DefaultConfig(), cfg, 4096, map[string]engine.Generator{"w0": stalled, "w1": &enginetest.Scripted{Name: "m", Output: toks("x")}})
	start := time.Now()
	resp := post(t, f.url+"/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Tandem-Worker") != "w1" {
		t.Fatalf("status %d from %q, want 200 from w1", resp.StatusCode, resp.Header.Get("X-Tandem-Worker"))
	}
	t.Logf("moved off the stalled worker after %v", time.Since(start).Round(time.Millisecond))

	only := newFixtureDispatch(t, DefaultConfig(), cfg, 4096, map[string]engine.Generator{"w0": newBlocking()})
	resp = post(t, only.url+"/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`)
	if _, code := errParam(t, resp); resp.StatusCode != 504 || code != "first_token_timeout" {
		t.Fatalf("status %d code %q, want 504 first_token_timeout", resp.StatusCode, code)
	}
}

// Finding 5 of issue 33: while --max-connections are open, /health, /live
// and /metrics still answer on the probe reserve; anything else there is
// a 503; a reserved connection is closed after its answer; past the
// reserve a connection gets the canned 503.
func TestProbeReserve(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HTTP.MaxConns, cfg.HTTP.ProbeConns = 2, 1
	f := newFixtureCfg(t, cfg, 4096, map[string]engine.Generator{"w0": &enginetest.Scripted{Name: "m", Output: toks("x")}})
	addr := limitedServer(t, f)
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	time.Sleep(50 * time.Millisecond) // both accepted
	// ask sends one request on a new connection. The reserved slot comes
	// free when the server has closed the previous reserved connection,
	// which may be after the client saw it close; until then a new
	// connection is past the reserve and gets the canned 503 without its
	// request being read, so ask dials again while that is the answer.
	canned := tooManyConns[bytes.Index(tooManyConns, []byte("\r\n\r\n"))+4:] // its body
	ask := func(path string) (status string, closed bool, took time.Duration) {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
			rd := bufio.NewReader(c)
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			took = time.Since(start)
			rest, err := io.ReadAll(rd) // the server closes a reserved connection after its answer
			c.Close()
			if bytes.HasSuffix(rest, canned) && time.Now().Before(deadline) {
				continue // the canned 503: the slot was not free yet
			}
			return strings.TrimSpace(line), err == nil, took
		}
	}
	for _, p := range []string{"/health", "/live", "/metrics"} {
		st, closed, took := ask(p)
		if !strings.Contains(st, "200") || !closed {
			t.Fatalf("%s while the cap is full: %q (closed %v)", p, st, closed)
		}
		t.Logf("%s with the cap full: %s in %v", p, st, took.Round(time.Microsecond))
	}
	if st, _, _ := ask("/v1/models"); !strings.Contains(st, "503") {
		t.Fatalf("/v1/models on a reserved connection: %q, want 503", st)
	}
	// An idle connection holds the one reserved slot: the next gets the
	// canned 503 without sending anything. The slot comes free when the
	// server has closed the last reserved connection, which may be after
	// the client saw it close: until then a new connection is itself past
	// the reserve (the canned 503), so dial until one is held silent.
	var idle net.Conn
	for deadline := time.Now().Add(5 * time.Second); ; {
		var err error
		if idle, err = net.Dial("tcp", addr); err != nil {
			t.Fatal(err)
		}
		idle.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		var b [1]byte
		_, err = idle.Read(b[:])
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			break
		}
		idle.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the reserved slot never came free: last read %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer idle.Close()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil || !strings.Contains(line, "503") {
		t.Fatalf("past the reserve: %q %v, want a 503", line, err)
	}
	// The idle reserved connection is cut after ProbeConnLife.
	idle.SetReadDeadline(time.Now().Add(ProbeConnLife + 5*time.Second))
	start := time.Now()
	if _, err := io.Copy(io.Discard, idle); err != nil {
		t.Fatalf("the idle reserved connection was not closed by the server: %v after %v", err, time.Since(start))
	}
}

// longStreams starts every stream with one token at once, then holds it
// until released or cancelled: long generations in flight.
type longStreams struct {
	release chan struct{}
	started chan struct{}
}

func (l *longStreams) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	p := engine.NewPipe(ctx)
	go func() {
		p.Send(engine.Delta{Tokens: []engine.Token{'x'}, PromptTokens: len(req.Prompt)})
		l.started <- struct{}{}
		select {
		case <-l.release:
			p.Send(engine.Delta{Tokens: []engine.Token{'y'}, Finish: engine.FinishLength})
		case <-ctx.Done():
			p.Fail(ctx.Err())
		}
	}()
	return p, nil
}

// Finding 5 of issue 33: with 512 long streams in flight (the default
// --max-inflight), a short request gets its 429 within 1.5 s
// (--admission-wait, default 1 s, not the 30 s queue timeout) with a
// Retry-After, and /health answers in under 100 ms throughout.
func TestSaturatedShortRequest(t *testing.T) {
	const streams = 512
	eng := &longStreams{release: make(chan struct{}), started: make(chan struct{}, streams)}
	cfg := DefaultConfig()
	f := newFixtureCfg(t, cfg, 4096, map[string]engine.Generator{"w0": eng})
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: streams}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	defer func() { close(eng.release); wg.Wait() }()
	body := `{"model":"m","prompt":"hi","max_tokens":2,"stream":true}`
	for range streams {
		wg.Go(func() {
			resp, err := client.Post(f.url+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	deadline := time.After(20 * time.Second)
	for range streams {
		select {
		case <-eng.started:
		case <-deadline:
			t.Fatal("the long streams did not all start")
		}
	}
	// /health, polled throughout the short request's wait.
	stop := make(chan struct{})
	var worst time.Duration
	var polls int
	var hwg sync.WaitGroup
	hwg.Go(func() {
		hc := &http.Client{Timeout: 5 * time.Second}
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			resp, err := hc.Get(f.url + "/health")
			d := time.Since(start)
			if err != nil {
				t.Errorf("/health: %v", err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			worst, polls = max(worst, d), polls+1
			time.Sleep(10 * time.Millisecond)
		}
	})
	start := time.Now()
	resp := post(t, f.url+"/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`)
	took := time.Since(start)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	close(stop)
	hwg.Wait()
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != 429 || ra < 1 || ra > 60 {
		t.Fatalf("short request: status %d Retry-After %q, want 429 with 1..60", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if took > 1500*time.Millisecond {
		t.Fatalf("the short request's 429 took %v, want under 1.5 s", took)
	}
	if worst >= 100*time.Millisecond {
		t.Fatalf("/health took %v at worst (%d polls), want under 100 ms", worst, polls)
	}
	t.Logf("%d streams in flight: short request 429 (Retry-After %d) in %v; /health worst %v over %d polls", streams, ra, took.Round(time.Millisecond), worst.Round(time.Microsecond), polls)
}

// The Retry-After of an admission 429 follows the completion rate: the
// requests ahead in the queue plus this one, over completions per second.
func TestRetryAfterFromCompletionRate(t *testing.T) {
	cases := []struct {
		name        string
		completions int // in the last window
		waiting     int
		want        int
	}{
		{"nothing finished: the window", 0, 0, completionWindow},
		{"one a second, none waiting", completionWindow, 0, 1},
		{"one a second, 4 waiting", completionWindow, 4, 5},
		{"ten a second, 19 waiting", 10 * completionWindow, 19, 2},
		{"slow, many waiting: capped", 1, 500, 60},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newAdmission("m", DefaultConfig(), nil, func(string) {})
			now := time.Now().Unix()
			for i := range tc.completions {
				a.done.add(now - int64(i%completionWindow))
			}
			a.waiting = tc.waiting
			if got := a.retryAfterLocked(0); got != tc.want {
				t.Fatalf("Retry-After %d, want %d", got, tc.want)
			}
		})
	}
}
