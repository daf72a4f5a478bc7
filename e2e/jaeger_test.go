package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/internal/sharedfiles"
)

// jaegerConfig is Jaeger v2 (an OpenTelemetry Collector distribution)
// with an in-memory store: OTLP/gRPC in, the query API out, both on
// loopback only (its defaults bind every interface).
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics: {level: none}
    traces: {level: none}
    logs: {level: warn}
extensions:
  jaeger_query:
    storage: {traces: mem}
    http: {endpoint: "%s"}
    grpc: {endpoint: "%s"}
  jaeger_storage:
    backends:
      mem:
        memory: {max_traces: 10000}
receivers:
  otlp:
    protocols:
      grpc: {endpoint: "%s"}
processors:
  batch: {timeout: 200ms}
exporters:
  jaeger_storage_exporter: {trace_storage: mem}
`

// startJaeger runs the binary scripts/build-jaeger.sh built (TANDEM_JAEGER,
// else its cache path) and returns the OTLP endpoint and the query URL.
func startJaeger(t *testing.T) (otlp, query string) {
	t.Helper()
	bin := os.Getenv("TANDEM_JAEGER")
	if bin == "" {
		bin = filepath.Join(sharedfiles.CacheDir(), "bin", "jaeger-v1.76.0")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no Jaeger binary (scripts/build-jaeger.sh builds it): %v", err)
	}
	otlp, httpAddr, grpcAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(jaegerConfig, httpAddr, grpcAddr, otlp)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", "file:"+cfg)
	// Jaeger's query service traces itself through the OTel SDK's
	// environment defaults (an exporter to localhost:4317, which then
	// retries for minutes on SIGTERM): off.
	cmd.Env = append(os.Environ(), "OTEL_SDK_DISABLED=true", "OTEL_TRACES_EXPORTER=none")
	logf, _ := os.Create(filepath.Join(t.TempDir(), "jaeger.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
	query = "http://" + httpAddr
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(query + "/api/services"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return otlp, query
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("jaeger did not start:\n%s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type jaegerTrace struct {
	Data []struct {
		Spans []struct {
			SpanID        string `json:"spanID"`
			OperationName string `json:"operationName"`
			StartTime     int64  `json:"startTime"` // µs
			Duration      int64  `json:"duration"`
			ProcessID     string `json:"processID"`
			References    []struct {
				RefType string `json:"refType"`
				SpanID  string `json:"spanID"`
			} `json:"references"`
		} `json:"spans"`
		Processes map[string]struct {
			ServiceName string `json:"serviceName"`
			Tags        []struct {
				Key   string `json:"key"`
				Value any    `json:"value"`
			} `json:"tags"`
		} `json:"processes"`
	} `json:"data"`
}

// TestJaegerTrace: a disaggregated request across three processes
// (frontend, prefill worker, decode worker), sent with a client's W3C
// traceparent, appears in Jaeger as one trace with the frontend's,
// the prefill worker's and the decode worker's spans in order, read back
// from Jaeger's query API.
func TestJaegerTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Jaeger and 3 processes")
	}
	if secure.on {
		t.Skip("sets up its own protections")
	}
	otlp, query := startJaeger(t)
	c := startObsCluster(t, " --otlp-endpoint "+otlp+" --trace-sample-ratio 1", "p1", "d1")
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	h := http.Header{"Traceparent": {"00-" + traceID + "-b7ad6b7169203331-01"}}
	if err := c.post(t, 0, 1, h); err != nil {
		t.Fatal(err)
	}
	want := []string{"http.request", "tokenize", "queue", "route", "first_token", "disagg.decide",
		"tandem.requestplane.v1.Worker/Prefill", "prefill", "kv_transfer", "kv_receive", "tandem.requestplane.v1.Worker/Generate", "stream"}
	var tr jaegerTrace
	deadline := time.Now().Add(20 * time.Second)
	for {
		tr = jaegerTrace{}
		if resp, err := http.Get(query + "/api/traces/" + traceID); err == nil {
			_ = json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&tr)
			resp.Body.Close()
		}
		if len(tr.Data) == 1 && hasAll(tr, want) && len(tr.Data[0].Processes) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s in Jaeger: %d traces, spans %v, %d processes; want %v across 3", traceID, len(tr.Data), names(tr), len(procs(tr)), want)
		}
		time.Sleep(250 * time.Millisecond)
	}
	d := tr.Data[0]
	start := map[string]int64{}
	end := map[string]int64{}
	service := map[string]string{}
	for _, s := range d.Spans {
		if _, ok := start[s.OperationName]; !ok || s.StartTime < start[s.OperationName] {
			start[s.OperationName] = s.StartTime
		}
		end[s.OperationName] = max(end[s.OperationName], s.StartTime+s.Duration)
		p := d.Processes[s.ProcessID]
		inst := ""
		for _, tag := range p.Tags {
			if tag.Key == "service.instance.id" {
				inst = fmt.Sprint(tag.Value)
			}
		}
		service[s.OperationName] += p.ServiceName + "/" + inst + " "
	}
	// Where each step ran.
	for op, who := range map[string]string{"http.request": "tandem-frontend", "route": "tandem-frontend", "disagg.decide": "tandem-frontend",
		"prefill": "tandem-worker/p1", "kv_transfer": "tandem-worker/p1", "stream": "tandem-frontend"} {
		if !strings.Contains(service[op], who) {
			t.Errorf("%s ran in %q, want %s", op, service[op], who)
		}
	}
	// The KV transfer wire carries the trace context: the decode worker's
	// receiving span is in the same trace.
	if !strings.Contains(service["kv_receive"], "tandem-worker/d1") {
		t.Errorf("kv_receive ran in %q, want tandem-worker/d1", service["kv_receive"])
	}
	if !strings.Contains(service["tandem.requestplane.v1.Worker/Generate"], "tandem-worker/d1") {
		t.Errorf("the decode worker's Generate span is missing: %q", service["tandem.requestplane.v1.Worker/Generate"])
	}
	// In order: route before the decision, the decision's prefill leg
	// (prefill and its transfer) before the decode worker generates, the
	// first token before the stream.
	for _, pair := range [][2]string{{"tokenize", "route"}, {"route", "disagg.decide"}, {"disagg.decide", "prefill"},
		{"prefill", "tandem.requestplane.v1.Worker/Generate"}, {"kv_transfer", "kv_receive"}, {"first_token", "stream"}} {
		if start[pair[1]] < start[pair[0]] {
			t.Errorf("%s starts before %s", pair[1], pair[0])
		}
	}
	if end["kv_transfer"] > start["tandem.requestplane.v1.Worker/Generate"]+1000 {
		t.Errorf("the KV transfer ended after the decode worker started generating")
	}
	if end["first_token"] > start["stream"]+1000 {
		t.Errorf("first_token ends after the stream starts")
	}
	t.Logf("trace %s: %d spans from %d processes", traceID, len(d.Spans), len(d.Processes))
}

func names(tr jaegerTrace) []string {
	var out []string
	for _, d := range tr.Data {
		for _, s := range d.Spans {
			out = append(out, s.OperationName)
		}
	}
	return out
}

func procs(tr jaegerTrace) []string {
	var out []string
	for _, d := range tr.Data {
		for _, p := range d.Processes {
			out = append(out, p.ServiceName)
		}
	}
	return out
}

func hasAll(tr jaegerTrace, want []string) bool {
	got := map[string]bool{}
	for _, n := range names(tr) {
		got[n] = true
	}
	for _, w := range want {
		if !got[w] {
			return false
		}
	}
	return true
}
