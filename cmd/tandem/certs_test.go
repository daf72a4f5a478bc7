package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/tandemllm/tandem/authn"
)

// TestCertsInit: `tandem certs init` makes a private directory with a CA
// and per-process pairs that load as cluster identities, never overwrites
// them, and `certs issue` adds one.
func TestCertsInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	run := func(args ...string) error {
		cmd := newRootCmd()
		cmd.SetArgs(args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		return cmd.Execute()
	}
	if err := run("certs", "init", "--dir", dir, "--workers", "2"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}
	for _, name := range []string{"ca", "frontend-1", "worker-1", "worker-2"} {
		fi, err := os.Stat(filepath.Join(dir, name+".key"))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s.key mode %v (%v), want 0600", name, fi.Mode().Perm(), err)
		}
	}
	load := func(name string) *authn.Cluster {
		c, err := authn.Load(authn.Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := load("worker-2"); c.Role() != authn.RoleWorker || c.Name() != "worker-2" {
		t.Fatalf("worker-2: %s %s", c.Role(), c.Name())
	}
	if err := run("certs", "init", "--dir", dir); err == nil {
		t.Fatal("init overwrote an existing CA")
	}
	if err := run("certs", "issue", "--dir", dir, "--name", "prometheus", "--role", "monitor"); err != nil {
		t.Fatal(err)
	}
	if c := load("prometheus"); c.Role() != authn.RoleMonitor {
		t.Fatalf("issued role %s", c.Role())
	}
	if err := run("certs", "issue", "--dir", dir, "--name", "x", "--role", "admin"); err == nil {
		t.Fatal("an unknown role was issued")
	}
}
