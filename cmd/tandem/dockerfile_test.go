package main

import (
	"strings"
	"testing"
)

// TestVersionCommand checks that `tandem version` never prints a made-up
// version: without link-time stamps it reports the build info's, or "unknown".
func TestVersionCommand(t *testing.T) {
	tests := []struct{ version, commit, want string }{
		{"v1.2.3", "abc", "tandem v1.2.3 (commit abc, go"},
		{"", "", "tandem "},
	}
	for _, tc := range tests {
		version, commit = tc.version, tc.commit
		var b strings.Builder
		c := newVersionCmd()
		c.SetOut(&b)
		c.Run(c, nil)
		if !strings.HasPrefix(b.String(), tc.want) || strings.Contains(b.String(), "dev") {
			t.Errorf("version=%q commit=%q: got %q, want prefix %q", tc.version, tc.commit, b.String(), tc.want)
		}
	}
	version, commit = "", ""
}
