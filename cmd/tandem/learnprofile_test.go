package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestLearnProfileFlagErrors: each bad combination is refused before
// anything starts, naming the flag.
func TestLearnProfileFlagErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"version":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ args, want string }{
		{"--engine native", "needs --engine mocker"},
		{"--instant", "--instant"},
		{"--learn-profile-interval 10ms", "--learn-profile-interval"},
		{"--learn-profile-base " + bad, "--learn-profile-base"},
		{"--learn-profile-min-samples 0", "--learn-profile-min-samples"},
		{"--speedup 1e9", "time scale"},
	} {
		t.Run(tc.args, func(t *testing.T) {
			cmd := &cobra.Command{Use: "serve"}
			setup := newServeSetup(cmd)
			var l learnFlags
			l.AddFlags(cmd.Flags())
			if err := cmd.ParseFlags(append([]string{"--learn-profile", filepath.Join(t.TempDir(), "p.json")}, strings.Fields(tc.args)...)); err != nil {
				t.Fatal(err)
			}
			err := l.attach(setup)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}
