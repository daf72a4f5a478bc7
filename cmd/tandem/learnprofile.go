package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/tandemllm/tandem/control/planner"
	"github.com/tandemllm/tandem/control/planner/sim"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/nodes/serve/launch"
)

// learnFlags are `tandem serve --learn-profile`: a planner.ProfileLearner
// observing every in-process mocker worker's steps, its profile written by
// a planner.LearnWriter.
type learnFlags struct {
	planner.LearnFile

	learner *planner.ProfileLearner
	writer  *planner.LearnWriter
}

// attach builds the learner and sets it as the step observer of the
// engines setup will build. It does nothing without --learn-profile.
func (l *learnFlags) attach(s *launch.Setup) error {
	if l.File == "" {
		return nil
	}
	if s.Engine.Kind != "mocker" {
		return fmt.Errorf("--learn-profile needs --engine mocker (only the mocker reports its steps), not %q", s.Engine.Kind)
	}
	m := &s.Engine.Mock
	if m.Instant {
		return errors.New("--learn-profile with --instant: steps take no time, there is nothing to learn")
	}
	if err := l.Check(); err != nil {
		return err
	}
	var base *planner.Profile
	if l.Base != "" {
		var err error
		if base, err = planner.LoadProfile(l.Base); err != nil {
			return fmt.Errorf("--learn-profile-base: %w", err)
		}
	} else {
		tm := mocker.DynamoTiming()
		if s.Engine.Timing == "qwen3-0.6b" {
			tm = mocker.Qwen3_0_6BTiming()
		}
		base = sim.WorkerSpec{Timing: tm, KVCapacityTokens: m.KVCapacityTokens, MaxNumSeqs: m.MaxNumSeqs,
			MaxNumBatchedTokens: m.MaxNumBatchedTokens}.Profile()
		base.Worker = "mocker --timing " + s.Engine.Timing
	}
	// The mocker at --speedup S sleeps 1/S of its model time: scale the
	// wall durations back to the model's.
	scale := m.Speedup
	if scale == 0 {
		scale = 1
	}
	var err error
	l.learner, err = planner.NewProfileLearner(planner.LearnConfig{Base: base, TimeScale: scale, MinSamples: l.MinSamples})
	if err != nil {
		return fmt.Errorf("--learn-profile: %w", err)
	}
	m.StepObserver = l.learner
	return nil
}

// start writes the profile every interval until finish; write failures
// go on board (the serve system's).
func (l *learnFlags) start(log *slog.Logger, board *health.Board) error {
	if l.learner == nil {
		return nil
	}
	var err error
	if l.writer, err = planner.NewLearnWriter(l.learner, l.File, l.Interval, log, board); err != nil {
		return err
	}
	l.writer.Start()
	return nil
}

// finish stops the writer and writes the profile once more.
func (l *learnFlags) finish() {
	if l.writer != nil {
		l.writer.Finish()
	}
}

// source is the learned profile for `serve --autoscale`, nil without
// --learn-profile.
func (l *learnFlags) source() func() *planner.Profile {
	if l.writer == nil {
		return nil
	}
	return l.writer.Source()
}
