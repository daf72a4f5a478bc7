package planner_test

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/tandemllm/tandem/control/planner"
	"github.com/tandemllm/tandem/control/planner/sim"
	"github.com/tandemllm/tandem/health"
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
	file := filepath.Join(t.TempDir(), "missing", "p.json")
	w, err := planner.NewLearnWriter(learner, file, time.Minute, log, board)
	if err != nil {
		t.Fatal(err)
	}
	w.Write()
	if !board.IsActive(planner.DiagLearnWriteFailed, "learn-profile") {
		t.Fatal("a failed write raised nothing")
	}
	file = filepath.Join(t.TempDir(), "p.json")
	if w, err = planner.NewLearnWriter(learner, file, time.Minute, log, board); err != nil {
		t.Fatal(err)
	}
	w.Write()
	if board.IsActive(planner.DiagLearnWriteFailed, "learn-profile") {
		t.Fatal("a good write did not clear the diagnostic")
	}
	if _, err := planner.LoadProfile(file); err != nil {
		t.Fatal(err)
	}
}

// TestLearnWriterLifecycle: Finish stops the ticker and writes once more,
// a second Finish does nothing, and a writer needs a learner, a file and a
// positive interval.
func TestLearnWriterLifecycle(t *testing.T) {
	learner, err := planner.NewProfileLearner(planner.LearnConfig{Base: sim.WorkerSpec{}.Profile()})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	file := filepath.Join(t.TempDir(), "p.json")
	for _, tc := range []struct {
		l        *planner.ProfileLearner
		file     string
		interval time.Duration
	}{{nil, file, time.Minute}, {learner, "", time.Minute}, {learner, file, 0}} {
		if _, err := planner.NewLearnWriter(tc.l, tc.file, tc.interval, log, nil); err == nil {
			t.Errorf("writer of %v, %q, %v accepted", tc.l, tc.file, tc.interval)
		}
	}
	w, err := planner.NewLearnWriter(learner, file, time.Hour, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	w.Finish()
	w.Finish()
	if _, err := planner.LoadProfile(file); err != nil {
		t.Fatalf("no profile after Finish: %v", err)
	}
	if (planner.LearnFile{Interval: time.Minute, MinSamples: 3}).Check() != nil || (planner.LearnFile{Interval: time.Millisecond, MinSamples: 3}).Check() == nil {
		t.Error("LearnFile.Check")
	}
}
