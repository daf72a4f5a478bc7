package live

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
)

// TestParsePool: NAME=ROLE:MIN:MAX, range-checked.
func TestParsePool(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"agg=aggregated:1:8", true}, {"p=prefill:0:0", true},
		{"agg", false}, {"=aggregated:1:2", false}, {"agg=aggregated:2:1", false}, {"agg=aggregated:-1:2", false},
		{"agg=aggregated:1:70000", false}, {"agg=nope:1:2", false}, {"agg=aggregated:1", false},
	} {
		p, err := ParsePool(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("%q: %+v, %v", tc.in, p, err)
		}
	}
}

// TestBuildAndReadKey: the flags' defaults build a planner; a key file's
// first non-comment line is the key.
func TestBuildAndReadKey(t *testing.T) {
	var c Config
	fs := pflag.NewFlagSet("planner", pflag.ContinueOnError)
	c.AddFlags(fs, []string{"agg=aggregated:1:8"})
	if err := fs.Parse([]string{"--policy", "dynamo", "--predictor", "constant"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Build(nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	c.Policy = "nope"
	if _, err := c.Build(nil, nil, nil); err == nil {
		t.Error("an unknown policy built")
	}
	f := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(f, []byte("# comment\n\n  sekrit \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := ReadKey(f); err != nil || k != "sekrit" {
		t.Errorf("ReadKey: %q, %v", k, err)
	}
}
