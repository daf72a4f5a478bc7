package planner

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/tandemllm/tandem/health"
)

// LearnFile is `tandem serve --learn-profile`: where a ProfileLearner's
// profile is written, how often, and what it starts from.
type LearnFile struct {
	// File receives the profile (--learn-profile); empty: no learning.
	File string
	// Base is a profile JSON giving the grid and unlearned cells
	// (--learn-profile-base); empty: the caller derives one.
	Base string
	// Interval is how often the profile is written (and once at the end).
	Interval time.Duration
	// MinSamples is LearnConfig.MinSamples.
	MinSamples int
}

// AddFlags registers the --learn-profile* flags with their defaults.
func (c *LearnFile) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.File, "learn-profile", "", "learn a planner profile from the workers' own step timings and write it to this file (mocker engine)")
	fs.StringVar(&c.Base, "learn-profile-base", "", "profile JSON giving the learned profile's grid and the values of cells without data (empty: --autoscale's --profile, else derived from the mocker's --timing)")
	fs.DurationVar(&c.Interval, "learn-profile-interval", time.Minute, "how often the learned profile is written (and once at shutdown)")
	fs.IntVar(&c.MinSamples, "learn-profile-min-samples", 3, "observations a cell needs before its learned value replaces the base's")
}

// Check range-checks Interval ([1s, 24h]) and MinSamples ([1, 31]: a cell
// keeps 31 values), naming the flags.
func (c LearnFile) Check() error {
	if c.Interval < time.Second || c.Interval > 24*time.Hour {
		return fmt.Errorf("--learn-profile-interval %v must be in [1s, 24h]", c.Interval)
	}
	if c.MinSamples < 1 || c.MinSamples > 31 {
		return fmt.Errorf("--learn-profile-min-samples %d must be in [1, 31] (a cell keeps 31 values)", c.MinSamples)
	}
	return nil
}

// Diagnostics of a LearnWriter (subject "learn-profile"): the learned
// profile cannot be written (or does not validate); cleared by the next
// write that succeeds.
const (
	DiagLearnWriteFailed = "profile_learn_write_failed"
	DiagLearnWritten     = "profile_learn_written"
)

var _ = health.Register(DiagLearnWriteFailed, DiagLearnWritten)

// LearnWriter writes a learner's profile to a file every interval, from
// Start until Finish, and once more at Finish.
type LearnWriter struct {
	learner  *ProfileLearner
	file     string
	interval time.Duration
	log      *slog.Logger
	board    *health.Board

	stop, done chan struct{}
	once       sync.Once
}

// NewLearnWriter returns the writer of l's profile to file every interval
// (positive). Write failures go on board (nil: logged on log).
func NewLearnWriter(l *ProfileLearner, file string, interval time.Duration, log *slog.Logger, board *health.Board) (*LearnWriter, error) {
	if l == nil || file == "" || interval <= 0 {
		return nil, errors.New("planner: a learn writer needs a learner, a file and a positive interval")
	}
	if log == nil {
		log = slog.Default()
	}
	return &LearnWriter{learner: l, file: file, interval: interval, log: log, board: board}, nil
}

// Start writes the profile every interval until Finish.
func (w *LearnWriter) Start() {
	if w.stop != nil {
		return
	}
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.done)
		t := time.NewTicker(w.interval)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				w.Write()
			}
		}
	}()
}

// Finish stops the ticker and writes the profile once more; later calls
// do nothing.
func (w *LearnWriter) Finish() {
	if w.stop == nil {
		return
	}
	w.once.Do(func() {
		close(w.stop)
		<-w.done
		w.Write()
	})
}

// Source is the learned profile for a live planner: a profile that does
// not validate (it always should) is logged and skipped, so the planner
// keeps its current one.
func (w *LearnWriter) Source() func() *Profile {
	return func() *Profile {
		p, err := w.learner.Profile()
		if err != nil {
			w.log.Error("learned profile not used", "err", err)
			return nil
		}
		return p
	}
}

// Write writes the profile now: a failure raises DiagLearnWriteFailed
// (or is logged without a board), a success clears it.
func (w *LearnWriter) Write() {
	st := w.learner.Stats()
	p, err := w.learner.Profile()
	if err == nil {
		err = p.WriteFile(w.file)
	}
	if err != nil {
		if w.board != nil {
			w.board.Raise(DiagLearnWriteFailed, "learn-profile", health.Warn,
				fmt.Sprintf("learned profile not written to %s: %v", w.file, err))
		} else {
			w.log.Error("learned profile not written", "file", w.file, "err", err)
		}
		return
	}
	if w.board != nil {
		w.board.Clear(DiagLearnWriteFailed, "learn-profile", DiagLearnWritten, "learned profile written again")
	}
	w.log.Info("learned profile written", "file", w.file, "steps", st.Steps, "prefill_cells", st.PrefillCells,
		"decode_cells", st.DecodeCells, "mixed_steps", st.Mixed, "off_grid_steps", st.OffGrid, "outliers", st.Outliers)
}
