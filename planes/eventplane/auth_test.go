package eventplane

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/health"
)

// TestNATSAuth: the embedded server with a token and mutual TLS refuses
// anonymous, token-less and certificate-less clients, and serves a client
// with both.
func TestNATSAuth(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if _, err := authn.Init(certs, 1, 1, []string{"127.0.0.1", "localhost"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte("nats-test-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pair := func(name string) Auth {
		return Auth{TokenFile: tokFile, CA: filepath.Join(certs, "ca.crt"), Cert: filepath.Join(certs, name+".crt"), Key: filepath.Join(certs, name+".key")}
	}
	srv, err := StartServerWith("127.0.0.1:0", pair("frontend-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	worker := pair("worker-1")
	wtls, err := worker.clientTLS()
	if err != nil {
		t.Fatal(err)
	}
	strangers := []struct {
		name string
		opts []nats.Option
	}{
		{"anonymous", nil},
		{"token without TLS", []nats.Option{nats.Token("nats-test-token-0123456789")}},
		{"TLS without a client certificate", []nats.Option{nats.Token("nats-test-token-0123456789"),
			nats.Secure(&tls.Config{RootCAs: wtls.RootCAs, MinVersion: tls.VersionTLS12})}},
		{"certificate without the token", []nats.Option{nats.Secure(wtls)}},
		{"wrong token", []nats.Option{nats.Token("wrong-token-0123456789"), nats.Secure(wtls)}},
	}
	for _, s := range strangers {
		t.Run(s.name, func(t *testing.T) {
			nc, err := nats.Connect(srv.URL(), append(s.opts, nats.Timeout(2*time.Second))...)
			if err == nil {
				nc.Close()
				t.Fatal("a stranger connected")
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nc, err := ConnectWith(ctx, srv.URL(), "w", worker, health.NewBoard(quiet, nil), quiet)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *nats.Msg, 1)
	if _, err := nc.ChanSubscribe("tandem.>", got); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("the authenticated client cannot talk: %v", err)
	}
	if err := nc.Publish("tandem.kv.m", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no message for the authenticated client")
	}
	if _, err := ConnectWith(ctx, srv.URL(), "w", Auth{TokenFile: filepath.Join(dir, "missing")}, nil, quiet); err == nil {
		t.Fatal("a missing token file connected")
	}
}

// TestNATSMonitorRole is issue 33's fourth finding: a monitor's
// certificate with the token connects (it may scrape) but cannot read KV
// event or load subjects, nor publish; a worker's can.
func TestNATSMonitorRole(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if _, err := authn.Init(certs, 1, 1, []string{"127.0.0.1", "localhost"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	ca, err := authn.LoadCA(certs)
	if err != nil {
		t.Fatal(err)
	}
	iss, err := ca.Issue("prometheus", authn.RoleMonitor, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(certs, "prometheus.crt"), iss.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(certs, "prometheus.key"), iss.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte("nats-test-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pair := func(name string) Auth {
		return Auth{TokenFile: tokFile, CA: filepath.Join(certs, "ca.crt"), Cert: filepath.Join(certs, name+".crt"), Key: filepath.Join(certs, name+".key")}
	}
	srv, err := StartServerWith("127.0.0.1:0", pair("frontend-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	connect := func(name string) (*nats.Conn, chan error) {
		a := pair(name)
		tc, err := a.clientTLS()
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 8)
		nc, err := nats.Connect(srv.URL(), nats.Token("nats-test-token-0123456789"), nats.Secure(tc), nats.Timeout(2*time.Second),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Cleanup(nc.Close)
		return nc, errs
	}
	worker, _ := connect("worker-1")
	monitor, merrs := connect("prometheus")
	got := make(chan *nats.Msg, 4)
	if _, err := monitor.ChanSubscribe("tandem.kv.>", got); err != nil {
		t.Fatal(err)
	}
	_ = monitor.Flush()
	wgot := make(chan *nats.Msg, 4)
	if _, err := worker.ChanSubscribe("tandem.kv.>", wgot); err != nil {
		t.Fatal(err)
	}
	if err := worker.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := worker.Publish("tandem.kv.m", []byte("prompt token ids")); err != nil {
		t.Fatal(err)
	}
	_ = worker.Flush()
	select {
	case <-wgot:
	case <-time.After(5 * time.Second):
		t.Fatal("the worker did not receive its own subject")
	}
	select {
	case m := <-got:
		t.Fatalf("the monitor read an event payload: %q", m.Data)
	case err := <-merrs:
		t.Logf("monitor refused: %v", err)
	case <-time.After(2 * time.Second):
		t.Fatal("no permissions violation reported to the monitor")
	}
	select {
	case m := <-got:
		t.Fatalf("the monitor read an event payload: %q", m.Data)
	case <-time.After(200 * time.Millisecond):
	}
}
