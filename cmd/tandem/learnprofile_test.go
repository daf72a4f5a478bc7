package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/planner"
	"github.com/tandemllm/tandem/planner/sim"
)

// TestLearnProfileWriteDiagnostic: a profile that cannot be written
// raises profile_learn_write_failed; the next good write clears it.
func TestLearnProfileWriteDiagnostic(t *testing.T) {
	learner, err := planner.NewProfileLearner(planner.LearnConfig{Base: sim.WorkerSpec{}.Profile()})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	board := health.NewBoard(log, nil)
	l := &learnFlags{file: filepath.Join(t.TempDir(), "missing", "p.json"), learner: learner, board: board}
	l.write(log)
	if !board.IsActive(codeLearnWriteFailed, "learn-profile") {
		t.Fatal("a failed write raised nothing")
	}
	l.file = filepath.Join(t.TempDir(), "p.json")
	l.write(log)
	if board.IsActive(codeLearnWriteFailed, "learn-profile") {
		t.Fatal("a good write did not clear the diagnostic")
	}
	if _, err := planner.LoadProfile(l.file); err != nil {
		t.Fatal(err)
	}
}

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
			l.register(cmd)
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
