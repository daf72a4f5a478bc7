package worker

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/planes/requestplane"
	"github.com/tandemllm/tandem/tokenizer"
)

// TestWorkerMTLS: with the cluster identity, the request plane serves
// only frontends and the metrics port only monitors and frontends.
func TestWorkerMTLS(t *testing.T) {
	dir := t.TempDir()
	if _, err := authn.Init(dir, 1, 1, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	ca, err := authn.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	is, err := ca.Issue("prometheus", authn.RoleMonitor, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := authn.WritePair(dir, "prometheus", is); err != nil {
		t.Fatal(err)
	}
	files := func(name string) authn.Files {
		return authn.Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
	}
	load := func(name string) *authn.Cluster {
		c, err := authn.Load(files(name))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	e := newMocker(t, model, false)
	cfg := DefaultConfig()
	cfg.ID, cfg.MTLS, cfg.MetricsAddr, cfg.DeregisterDelay = "w1", files("worker-1"), "127.0.0.1:0", 0
	reg := discovery.NewMem()
	defer reg.Close()
	w, err := Start(context.Background(), cfg, e, model, Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown(context.Background())
	rec := w.Record()

	generate := func(opts ...grpc.DialOption) error {
		c, err := requestplane.Dial(rec.RequestPlane, opts...)
		if err != nil {
			return err
		}
		defer c.Close()
		// Generous: a refusal returns at once, and the allowed Generate
		// must not time out on a loaded machine under the race detector.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := c.Generate(ctx, &engine.Request{Prompt: []engine.Token{1, 2, 3}, MaxTokens: 2, IgnoreEOS: true})
		if err != nil {
			return err
		}
		for {
			if _, err := st.Recv(); err != nil {
				if err.Error() == "EOF" {
					return nil
				}
				return err
			}
		}
	}
	creds := func(name string) grpc.DialOption {
		return grpc.WithTransportCredentials(credentials.NewTLS(load(name).Client(authn.RoleWorker)))
	}
	if err := generate(); err == nil {
		t.Error("plaintext Generate served")
	}
	if err := generate(creds("prometheus")); err == nil {
		t.Error("a monitor's Generate served")
	}
	if err := generate(creds("frontend-1")); err != nil {
		t.Errorf("the frontend's Generate: %v", err)
	}

	get := func(tc *tls.Config, scheme string) (int, error) {
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		resp, err := c.Get(scheme + rec.MetricsAddr + "/metrics")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get(nil, "http://"); err == nil && code == 200 {
		t.Error("plain HTTP metrics served")
	}
	if code, err := get(&tls.Config{InsecureSkipVerify: true}, "https://"); err == nil && code == 200 {
		t.Error("metrics served without a client certificate")
	}
	if code, err := get(load("worker-1").Client(authn.RoleWorker), "https://"); err == nil && code == 200 {
		t.Error("metrics served to a worker's certificate")
	}
	if code, err := get(load("prometheus").Client(authn.RoleWorker), "https://"); err != nil || code != 200 {
		t.Errorf("the monitor's scrape: %d %v", code, err)
	}
}

// TestOpenPlaneDiagnostic: a worker listening beyond loopback without
// mTLS says so on its board; on loopback, or with mTLS, it does not.
func TestOpenPlaneDiagnostic(t *testing.T) {
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		want bool
	}{{"0.0.0.0:0", true}, {"127.0.0.1:0", false}} {
		e := newMocker(t, model, false)
		cfg := DefaultConfig()
		cfg.ID, cfg.RequestPlaneAddr, cfg.DeregisterDelay = "w1", tc.addr, 0
		reg := discovery.NewMem()
		board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
		w, err := Start(context.Background(), cfg, e, model, Options{Registry: reg, Board: board})
		if err != nil {
			t.Fatal(err)
		}
		if got := board.IsActive(authn.DiagOpenPlane, "request-plane"); got != tc.want {
			t.Errorf("%s: %s raised %v, want %v", tc.addr, authn.DiagOpenPlane, got, tc.want)
		}
		_ = w.Shutdown(context.Background())
		reg.Close()
	}
}

// TestOpenKVEventsDiagnostic: a KV event socket on a wildcard address is
// flagged while its events carry token ids, not with hashes only.
func TestOpenKVEventsDiagnostic(t *testing.T) {
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, omit := range []bool{false, true} {
		cfgm := mocker.DefaultConfig()
		cfgm.Model, cfgm.EOS = model.Name, model.Tokenizer.EOS()
		cfgm.KVEvents.Enabled, cfgm.KVEvents.Endpoint, cfgm.KVEvents.OmitTokenIDs = true, "tcp://*:0", omit
		e, err := mocker.New(cfgm)
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.ID, cfg.DeregisterDelay = "w1", 0
		reg := discovery.NewMem()
		board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
		w, err := Start(context.Background(), cfg, e, model, Options{Registry: reg, Board: board})
		if err != nil {
			t.Fatal(err)
		}
		if got := board.IsActive(authn.DiagOpenPlane, "kv-events"); got == omit {
			t.Errorf("token ids omitted %v: kv-events flagged %v", omit, got)
		}
		_ = w.Shutdown(context.Background())
		reg.Close()
	}
}
