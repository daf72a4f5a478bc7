package discovery

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/internal/etcdtest"
)

func TestEtcdAuth(t *testing.T) {
	dir := t.TempDir()
	if _, err := authn.Init(dir, 0, 1, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("user", "tandem:s3cret-pass\n")
	var c clientv3.Config
	a := EtcdAuth{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "worker-1.crt"), Key: filepath.Join(dir, "worker-1.key"), UserFile: good}
	if err := a.apply(&c); err != nil {
		t.Fatal(err)
	}
	if c.TLS == nil || c.TLS.RootCAs == nil || len(c.TLS.Certificates) != 1 || c.Username != "tandem" || c.Password != "s3cret-pass" {
		t.Fatalf("config %+v", c)
	}
	for name, bad := range map[string]EtcdAuth{
		"user without password": {UserFile: write("nopass", "tandem\n")},
		"missing CA":            {CA: filepath.Join(dir, "missing")},
		"not a CA":              {CA: good},
		"cert without key":      {Cert: filepath.Join(dir, "worker-1.crt")},
	} {
		if err := bad.apply(&clientv3.Config{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestEtcdTLSAndUser runs the etcd backend against a real etcd serving
// TLS with client certificates required and role-based auth on: only a
// client with the CA, a certificate and the user registers.
func TestEtcdTLSAndUser(t *testing.T) {
	dir := t.TempDir()
	if _, err := authn.Init(dir, 1, 1, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	f := func(n string) string { return filepath.Join(dir, n) }
	srv := etcdtest.StartTLS(t, etcdtest.TLS{Cert: f("worker-1.crt"), Key: f("worker-1.key"), CA: f("ca.crt")})
	admin := EtcdAuth{CA: f("ca.crt"), Cert: f("frontend-1.crt"), Key: f("frontend-1.key")}
	var acfg clientv3.Config
	if err := admin.apply(&acfg); err != nil {
		t.Fatal(err)
	}
	acfg.Endpoints, acfg.DialTimeout = []string{srv.Endpoint()}, 5*time.Second
	cli, err := clientv3.New(acfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "root-pass-0123"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "tandem"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "tandem", "/tandem/", clientv3.GetPrefixRangeEnd("/tandem/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "tandem", "tandem-pass-0123"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "tandem", "tandem"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	user := write(t, dir, "user", "tandem:tandem-pass-0123")
	wrong := write(t, dir, "wrong", "tandem:not-the-password")
	for _, tc := range []struct {
		name string
		auth EtcdAuth
		ok   bool
	}{
		{"no TLS", EtcdAuth{}, false},
		{"CA, no client certificate", EtcdAuth{CA: f("ca.crt"), UserFile: user}, false},
		{"certificate, no user", admin, false},
		{"certificate, wrong password", EtcdAuth{CA: admin.CA, Cert: admin.Cert, Key: admin.Key, UserFile: wrong}, false},
		{"certificate and user", EtcdAuth{CA: admin.CA, Cert: admin.Cert, Key: admin.Key, UserFile: user}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := srv.Endpoint()
			if tc.auth.CA == "" {
				ep = "http://" + strings.TrimPrefix(ep, "https://")
			}
			// With a user the client authenticates inside NewEtcd; give the
			// one that should succeed time for it under -race and load.
			dial := time.Second
			if tc.ok {
				dial = 10 * time.Second
			}
			e, err := NewEtcd(EtcdConfig{Endpoints: []string{ep}, Auth: tc.auth, DialTimeout: dial,
				Common: Common{TTL: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)}})
			if err != nil {
				if tc.ok {
					t.Fatal(err)
				}
				return
			}
			defer e.Close()
			rctx, rcancel := context.WithTimeout(context.Background(), dial)
			defer rcancel()
			_, err = e.Register(rctx, testRecord("w-"+strings.ReplaceAll(tc.name, " ", "")[:4]))
			if (err == nil) != tc.ok {
				t.Fatalf("register: %v, want ok %v", err, tc.ok)
			}
		})
	}
}

func write(t *testing.T, dir, name, s string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
