package main

import (
	"fmt"
	"io"
	"time"
)

// stepProgress prints "what: N/M layers, elapsed, ETA" lines for long
// model work, at most one a second (and the last), the ETA from the mean
// time per step so far.
type stepProgress struct {
	w     io.Writer
	what  string
	start time.Time
	last  time.Time
}

func newStepProgress(w io.Writer, what string) *stepProgress {
	now := time.Now()
	fmt.Fprintf(w, "%s ...\n", what)
	return &stepProgress{w: w, what: what, start: now, last: now}
}

// step is a Progress callback (native.GenOptions, native.QuantizeOptions).
func (p *stepProgress) step(done, total int) {
	now := time.Now()
	if done < total && now.Sub(p.last) < time.Second {
		return
	}
	p.last = now
	el := now.Sub(p.start)
	eta := "-"
	if done > 0 && total >= done {
		eta = (el / time.Duration(done) * time.Duration(total-done)).Round(time.Second).String()
	}
	fmt.Fprintf(p.w, "%s: layer %d/%d, %s elapsed, ETA %s\n", p.what, done, total, el.Round(time.Second), eta)
}
