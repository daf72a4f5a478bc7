package discovery

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tandemllm/tandem/authn"
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
