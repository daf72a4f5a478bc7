package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestConfigFile: --config sets flags by name, the command line wins, and
// unknown keys are refused.
func TestConfigFile(t *testing.T) {
	cases := []struct {
		name    string
		yaml    string
		args    []string
		want    map[string]string
		wantErr bool
	}{
		{"file values", "discovery: etcd\netcd-endpoints: [http://a:2379, http://b:2379]\nlease-ttl: 3s\nrole: decode\n", nil,
			map[string]string{"discovery": "etcd", "etcd-endpoints": "http://a:2379,http://b:2379", "lease-ttl": "3s", "role": "decode"}, false},
		{"command line wins", "discovery: etcd\nrp-addr: 0.0.0.0:9000\n", []string{"--discovery=file"},
			map[string]string{"discovery": "file", "rp-addr": "0.0.0.0:9000"}, false},
		{"engine flags too", "engine: mocker\nspeedup: 4\nkv-events: \"off\"\n", nil,
			map[string]string{"speedup": "4", "kv-events": "off"}, false},
		{"unknown key", "discovery: file\nno-such-flag: 1\n", nil, nil, true},
		{"bad value", "lease-ttl: forever\n", nil, nil, true},
		{"not a map", "- a\n- b\n", nil, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "worker.yaml")
			if err := os.WriteFile(path, []byte(c.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := newWorkerCmd()
			if err := cmd.ParseFlags(c.args); err != nil {
				t.Fatal(err)
			}
			err := applyConfigFile(cmd, path)
			if (err != nil) != c.wantErr {
				t.Fatalf("applyConfigFile: %v, want error %v", err, c.wantErr)
			}
			for name, want := range c.want {
				if got := cmd.Flags().Lookup(name).Value.String(); got != want {
					t.Errorf("--%s = %q, want %q", name, got, want)
				}
			}
		})
	}
}
