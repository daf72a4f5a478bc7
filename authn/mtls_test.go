package authn

import (
	"crypto/tls"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func load(t *testing.T, dir, name string) *Cluster {
	t.Helper()
	c, err := Load(Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// handshake serves one TLS connection with srv and dials it with cli;
// it returns the client's and the server's handshake errors.
func handshake(t *testing.T, srv, cli *tls.Config) (cerr, serr error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	done := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Server(c, srv)
		err = tc.Handshake()
		if err == nil {
			// TLS 1.3: the client's certificate is checked after the
			// client's handshake returns; a read surfaces the verdict.
			_, err = tc.Write([]byte{1})
		}
		done <- err
	}()
	c, err := net.DialTimeout("tcp", lis.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, cli)
	cerr = tc.Handshake()
	if cerr == nil {
		var b [1]byte
		_, cerr = tc.Read(b[:])
	}
	return cerr, <-done
}

func TestMutualTLS(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	if _, err := Init(dir, 1, 2, []string{"localhost", "127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := Init(other, 1, 1, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	fe, w1, w2 := load(t, dir, "frontend-1"), load(t, dir, "worker-1"), load(t, dir, "worker-2")
	alien := load(t, other, "frontend-1")
	if fe.Role() != RoleFrontend || w1.Name() != "worker-1" {
		t.Fatalf("identity: %s %s", fe.Role(), w1.Name())
	}
	noCert := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	for _, tc := range []struct {
		name string
		srv  *tls.Config
		cli  *tls.Config
		ok   bool
	}{
		{"frontend to worker request plane", w1.Server(RoleFrontend), fe.Client(RoleWorker), true},
		{"worker to worker transfer plane", w1.Server(RoleWorker), w2.Client(RoleWorker), true},
		{"worker to request plane", w1.Server(RoleFrontend), w2.Client(RoleWorker), false},
		{"stranger without certificate", w1.Server(RoleFrontend), noCert, false},
		{"certificate of another CA", w1.Server(RoleFrontend), alien.Client(RoleWorker), false},
		{"server of another CA", alien.Server(RoleFrontend), fe.Client(RoleWorker), false},
		{"server with the wrong role", fe.Server(RoleFrontend), fe.Client(RoleWorker), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cerr, serr := handshake(t, tc.srv, tc.cli)
			if ok := cerr == nil && serr == nil; ok != tc.ok {
				t.Fatalf("ok %v, want %v (client: %v; server: %v)", ok, tc.ok, cerr, serr)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Init(dir, 1, 0, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	if c, err := Load(Files{}); c != nil || err != nil {
		t.Fatalf("disabled: %v %v", c, err)
	}
	if _, err := Load(Files{CA: filepath.Join(dir, "ca.crt")}); err == nil || !strings.Contains(err.Error(), "all of") {
		t.Fatalf("partial flags: %v", err)
	}
	// The CA's own pair names no role.
	if _, err := Load(Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "ca.crt"), Key: filepath.Join(dir, "ca.key")}); err == nil {
		t.Fatal("a certificate without a role loaded")
	}
	// Init never overwrites keys.
	if _, err := Init(dir, 1, 0, nil, time.Hour); err == nil {
		t.Fatal("Init overwrote an existing CA")
	}
	ca, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	is, err := ca.Issue("w9", RoleWorker, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := WritePair(dir, "w9", is); err != nil {
		t.Fatal(err)
	}
	if c := load(t, dir, "w9"); c.Role() != RoleWorker {
		t.Fatalf("issued role %s", c.Role())
	}
}

func TestExposed(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:80": false, "127.0.0.2:9": false, "[::1]:80": false, "localhost:80": false,
		"0.0.0.0:80": true, "[::]:80": true, ":80": true, "10.0.0.5:9000": true, "node-a:9000": true,
	} {
		if got := Exposed(addr); got != want {
			t.Errorf("Exposed(%q) = %v, want %v", addr, got, want)
		}
	}
}
