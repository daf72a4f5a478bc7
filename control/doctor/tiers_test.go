package doctor

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestTierSpace: kv_tiers.space passes when the file system has room for
// what the tier may still write (the configured size less its files),
// fails when it has not or the directory is missing, and warns when the
// free space cannot be read.
func TestTierSpace(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "block"), make([]byte, 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	free := func(n int64, err error) func(string) (int64, error) {
		return func(string) (int64, error) { return n, err }
	}
	for _, tc := range []struct {
		name string
		disk TierDisk
		free func(string) (int64, error)
		want Verdict
	}{
		{"room", TierDisk{dir, 5000}, free(4000, nil), OK},
		{"files already written count", TierDisk{dir, 5000}, free(3999, nil), Fail},
		{"nothing left to write", TierDisk{dir, 500}, free(0, nil), OK},
		{"missing directory", TierDisk{filepath.Join(dir, "none"), 1}, free(1<<40, nil), Fail},
		{"a file, not a directory", TierDisk{filepath.Join(dir, "block"), 1}, free(1<<40, nil), Fail},
		{"free space unreadable", TierDisk{dir, 1}, free(0, errors.New("statfs: boom")), Warn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := checkTierDisk(tc.disk, tc.free)
			if c.Verdict != tc.want || c.ID != IDTierSpace || c.Subject != tc.disk.Dir || c.Summary == "" {
				t.Fatalf("check %+v, want verdict %s", c, tc.want)
			}
			if c.Verdict == Fail && c.Fix == "" {
				t.Fatalf("a failing check without a fix: %+v", c)
			}
		})
	}
	// The real file system: the temporary directory has room for 1 byte.
	if c := checkTierDisk(TierDisk{dir, 1}, statFree); c.Verdict == Fail {
		t.Fatalf("real statfs: %+v", c)
	}
}
