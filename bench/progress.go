package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Progress reports how a run is going: on an interactive terminal a bar
// redrawn in place, otherwise (CI logs, pipes) a plain line every Interval,
// because carriage-return redraws turn a log file into one enormous line.
// A nil *Progress reports nothing.
type Progress struct {
	W           io.Writer
	Interactive bool
	// Interval between plain lines; default 5 s. The bar redraws every
	// 100 ms regardless.
	Interval time.Duration
}

// IsTerminal reports whether f is a character device (a terminal), the
// test the CLI uses to pick the bar over plain lines.
func IsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

type progressRun struct {
	p      *Progress
	label  string
	total  int
	dur    time.Duration
	start  time.Time
	done   atomic.Int64
	errs   atomic.Int64
	stop   chan struct{}
	exited chan struct{}
	once   sync.Once
}

// begin starts reporting a run of total requests (0: unknown) or of dur.
func (p *Progress) begin(label string, total int, dur time.Duration) *progressRun {
	r := &progressRun{p: p, label: label, total: total, dur: dur, start: time.Now(),
		stop: make(chan struct{}), exited: make(chan struct{})}
	if p == nil || p.W == nil {
		close(r.exited)
		return r
	}
	every := 100 * time.Millisecond
	if !p.Interactive {
		every = p.Interval
		if every <= 0 {
			every = 5 * time.Second
		}
	}
	go func() {
		defer close(r.exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				r.draw(false)
			case <-r.stop:
				r.draw(true)
				return
			}
		}
	}()
	return r
}

func (r *progressRun) add(ok bool) {
	r.done.Add(1)
	if !ok {
		r.errs.Add(1)
	}
}

// end draws the final state and stops the reporter.
func (r *progressRun) end() {
	r.once.Do(func() { close(r.stop) })
	<-r.exited
}

func (r *progressRun) draw(final bool) {
	el := time.Since(r.start)
	done, errs := r.done.Load(), r.errs.Load()
	rate := 0.0
	if el > 0 {
		rate = float64(done) / el.Seconds()
	}
	count := fmt.Sprintf("%d", done)
	frac := -1.0
	switch {
	case r.total > 0:
		count = fmt.Sprintf("%d/%d", done, r.total)
		frac = float64(done) / float64(r.total)
	case r.dur > 0:
		frac = el.Seconds() / r.dur.Seconds()
	}
	stats := fmt.Sprintf("%s req  %.1f req/s  errors %d  elapsed %s", count, rate, errs, el.Round(100*time.Millisecond))
	if frac > 0 && frac < 1 && !final {
		// The time left at the pace so far.
		stats += "  ETA " + time.Duration(float64(el)*(1-frac)/frac).Round(time.Second).String()
	}
	if !r.p.Interactive {
		fmt.Fprintf(r.p.W, "%s: %s\n", r.label, stats)
		return
	}
	bar := ""
	if frac >= 0 {
		const width = 30
		n := int(min(frac, 1) * width)
		bar = "[" + strings.Repeat("=", n) + strings.Repeat(" ", width-n) + "] "
	}
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(r.p.W, "\r\033[K%s %s%s%s", r.label, bar, stats, end)
}
