package main

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/planner"
	"github.com/tandemllm/tandem/planner/sim"
)

// learnFlags are `tandem serve --learn-profile`: a planner.ProfileLearner
// observing every in-process mocker worker's steps, its profile written
// every --learn-profile-interval and at shutdown.
type learnFlags struct {
	file, base string
	interval   time.Duration
	minSamples int

	learner *planner.ProfileLearner
	board   *health.Board
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

func (l *learnFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&l.file, "learn-profile", "", "learn a planner profile from the workers' own step timings and write it to this file (mocker engine)")
	f.StringVar(&l.base, "learn-profile-base", "", "profile JSON giving the learned profile's grid and the values of cells without data (empty: --autoscale's --profile, else derived from the mocker's --timing)")
	f.DurationVar(&l.interval, "learn-profile-interval", time.Minute, "how often the learned profile is written (and once at shutdown)")
	f.IntVar(&l.minSamples, "learn-profile-min-samples", 3, "observations a cell needs before its learned value replaces the base's")
}

// attach builds the learner and sets it as the step observer of the
// engines setup will build. It does nothing without --learn-profile.
func (l *learnFlags) attach(s *serveSetup) error {
	if l.file == "" {
		return nil
	}
	if s.eng.kind != "mocker" {
		return fmt.Errorf("--learn-profile needs --engine mocker (only the mocker reports its steps), not %q", s.eng.kind)
	}
	m := &s.eng.mock
	if m.Instant {
		return errors.New("--learn-profile with --instant: steps take no time, there is nothing to learn")
	}
	if l.interval < time.Second || l.interval > 24*time.Hour {
		return fmt.Errorf("--learn-profile-interval %v must be in [1s, 24h]", l.interval)
	}
	if l.minSamples < 1 || l.minSamples > 31 {
		return fmt.Errorf("--learn-profile-min-samples %d must be in [1, 31] (a cell keeps 31 values)", l.minSamples)
	}
	var base *planner.Profile
	if l.base != "" {
		var err error
		if base, err = planner.LoadProfile(l.base); err != nil {
			return fmt.Errorf("--learn-profile-base: %w", err)
		}
	} else {
		tm := mocker.DynamoTiming()
		if s.eng.timing == "qwen3-0.6b" {
			tm = mocker.Qwen3_0_6BTiming()
		}
		base = sim.WorkerSpec{Timing: tm, KVCapacityTokens: m.KVCapacityTokens, MaxNumSeqs: m.MaxNumSeqs,
			MaxNumBatchedTokens: m.MaxNumBatchedTokens}.Profile()
		base.Worker = "mocker --timing " + s.eng.timing
	}
	// The mocker at --speedup S sleeps 1/S of its model time: scale the
	// wall durations back to the model's.
	scale := m.Speedup
	if scale == 0 {
		scale = 1
	}
	var err error
	l.learner, err = planner.NewProfileLearner(planner.LearnConfig{Base: base, TimeScale: scale, MinSamples: l.minSamples})
	if err != nil {
		return fmt.Errorf("--learn-profile: %w", err)
	}
	m.StepObserver = l.learner
	return nil
}

// Diagnostics of --learn-profile (subject "learn-profile"): the learned
// profile cannot be written (or does not validate); cleared by the next
// write that succeeds.
const (
	codeLearnWriteFailed = "profile_learn_write_failed"
	codeLearnWritten     = "profile_learn_written"
)

var _ = health.Register(codeLearnWriteFailed, codeLearnWritten)

// start writes the profile every interval until finish; write failures
// go on board (the serve system's).
func (l *learnFlags) start(log *slog.Logger, board *health.Board) {
	if l.learner == nil {
		return
	}
	l.board = board
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(l.done)
		t := time.NewTicker(l.interval)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
				l.write(log)
			}
		}
	}()
}

// finish stops the ticker and writes the profile once more.
func (l *learnFlags) finish(log *slog.Logger) {
	if l.learner == nil || l.stop == nil {
		return
	}
	l.once.Do(func() {
		close(l.stop)
		<-l.done
		l.write(log)
	})
}

// source is the learned profile for `serve --autoscale`, nil without
// --learn-profile. A profile that does not validate (it always should)
// is logged and skipped: the planner keeps its current one.
func (l *learnFlags) source(log *slog.Logger) func() *planner.Profile {
	if l.learner == nil {
		return nil
	}
	return func() *planner.Profile {
		p, err := l.learner.Profile()
		if err != nil {
			log.Error("learned profile not used", "err", err)
			return nil
		}
		return p
	}
}

func (l *learnFlags) write(log *slog.Logger) {
	st := l.learner.Stats()
	p, err := l.learner.Profile()
	if err == nil {
		err = p.WriteFile(l.file)
	}
	if err != nil {
		if l.board != nil {
			l.board.Raise(codeLearnWriteFailed, "learn-profile", health.Warn,
				fmt.Sprintf("learned profile not written to %s: %v", l.file, err))
		} else {
			log.Error("learned profile not written", "file", l.file, "err", err)
		}
		return
	}
	if l.board != nil {
		l.board.Clear(codeLearnWriteFailed, "learn-profile", codeLearnWritten, "learned profile written again")
	}
	log.Info("learned profile written", "file", l.file, "steps", st.Steps, "prefill_cells", st.PrefillCells,
		"decode_cells", st.DecodeCells, "mixed_steps", st.Mixed, "off_grid_steps", st.OffGrid, "outliers", st.Outliers)
}
