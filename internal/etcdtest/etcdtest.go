package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is one embedded etcd member.
type Server struct {
	tls          *TLS
	t            testing.TB
	dir          string
	client, peer string // host:port, fixed across restarts
	etcd         *embed.Etcd
	gen          int
}

// Start starts a single-member etcd on free loopback ports. Its ticks are
// short (10 ms heartbeat, 100 ms election) so that leases as short as one
// second are honoured and restarts elect a leader at once.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), client: freeAddr(t), peer: freeAddr(t)}
	s.start(filepath.Join(s.dir, "data0"))
	t.Cleanup(s.Stop)
	return s
}

// TLS makes the server's client port HTTPS with Cert/Key and, with CA,
// require client certificates signed by it (etcd's --client-cert-auth).
type TLS struct {
	Cert, Key, CA string
}

// StartTLS is Start with a TLS client port.
func StartTLS(t testing.TB, tls TLS) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), client: freeAddr(t), peer: freeAddr(t), tls: &tls}
	s.start(filepath.Join(s.dir, "data0"))
	t.Cleanup(s.Stop)
	return s
}

// Endpoint is the client URL.
func (s *Server) Endpoint() string {
	if s.tls != nil {
		return "https://" + s.client
	}
	return "http://" + s.client
}

func (s *Server) start(data string) {
	s.t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "tandem-test"
	cfg.Dir = data
	cu, _ := url.Parse(s.Endpoint())
	if s.tls != nil {
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: s.tls.Cert, KeyFile: s.tls.Key, TrustedCAFile: s.tls.CA, ClientCertAuth: s.tls.CA != ""}
	}
	pu, _ := url.Parse("http://" + s.peer)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.UnsafeNoFsync = true
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	var err error
	// A port released by a stopped member may linger briefly.
	for i := 0; i < 50; i++ {
		if s.etcd, err = embed.StartEtcd(cfg); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("etcdtest: start: %v", err)
	}
	select {
	case <-s.etcd.Server.ReadyNotify():
	case <-time.After(20 * time.Second):
		s.etcd.Close()
		s.t.Fatal("etcdtest: server not ready within 20s")
	}
}

// Stop stops the server; its data stays for Restart.
func (s *Server) Stop() {
	if s.etcd != nil {
		s.etcd.Close()
		s.etcd = nil
	}
}

// Restart starts the server again on the same ports. With keepData its
// keys and leases survive, as after a crash of a persistent etcd;
// without, it comes back empty, as an etcd that lost its volume.
func (s *Server) Restart(keepData bool) {
	s.t.Helper()
	s.Stop()
	if !keepData {
		s.gen++
	}
	s.start(filepath.Join(s.dir, fmt.Sprintf("data%d", s.gen)))
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
