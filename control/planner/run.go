package planner

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/tandemllm/tandem/health"
)

// Observer produces one interval's observation (a Scraper, or a hook).
type Observer interface {
	Observe(ctx context.Context, quantile float64) (Observation, error)
}

// Loop runs a planner against a live deployment: every interval it
// observes, decides and actuates, and it keeps the last decisions for
// /health.
type Loop struct {
	Planner  *Planner
	Observer Observer
	Actuator Actuator
	Board    *health.Board

	mu   sync.Mutex
	last []Decision
	obs  *observed
	err  string
}

// observed is the last observation as /health shows it.
type observed struct {
	At           time.Time          `json:"at"`
	Rate         float64            `json:"request_rate"`
	ISL          float64            `json:"input_tokens"`
	OSL          float64            `json:"output_tokens"`
	HitFrac      float64            `json:"kv_hit_fraction"`
	TTFTMs       float64            `json:"ttft_ms"`
	ITLMs        float64            `json:"itl_ms"`
	QueueDepth   float64            `json:"queue_depth"`
	WorkerActive map[string]float64 `json:"worker_active,omitempty"`
	Workers      []WorkerStats      `json:"workers,omitempty"`
	Replicas     map[string]int     `json:"replicas"`
}

// Run ticks until ctx ends.
func (l *Loop) Run(ctx context.Context) error {
	iv := l.Planner.cfg.Interval
	// Prime the observer so the first tick sees a whole interval.
	if _, err := l.Observer.Observe(ctx, l.Planner.cfg.Targets.Quantile); err != nil {
		l.observeFailed(err)
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			l.Tick(ctx)
		}
	}
}

// Tick runs one interval: observe, decide, actuate.
func (l *Loop) Tick(ctx context.Context) []Decision {
	p := l.Planner
	o, err := l.Observer.Observe(ctx, p.cfg.Targets.Quantile)
	if err != nil {
		l.observeFailed(err)
		// Without evidence the planner holds: it neither grows nor
		// shrinks a fleet it cannot see.
		return nil
	}
	if l.Board != nil {
		l.Board.Clear(CodeObserveFailed, "planner", CodeObserved, "the planner reads its metrics again")
	}
	cur, err := l.Actuator.Replicas(ctx)
	if err != nil {
		l.actuateFailed(err)
		return nil
	}
	o.Replicas = cur
	ob := &observed{At: o.At, Rate: o.Load.Rate, ISL: o.Load.ISL, OSL: o.Load.OSL, HitFrac: o.Load.HitFrac,
		TTFTMs: o.TTFTMs, ITLMs: o.ITLMs, QueueDepth: o.QueueDepth, WorkerActive: o.WorkerActive, Workers: o.Workers, Replicas: cur}
	for _, v := range []*float64{&ob.Rate, &ob.ISL, &ob.OSL, &ob.HitFrac} {
		if !usable(*v) {
			// JSON has no NaN: the first interval has no rate yet, and
			// one in which nothing finished has no mean output length.
			*v = 0
		}
	}
	p.log.Debug("planner observation", "rate", round3(ob.Rate), "isl", round3(ob.ISL), "osl", round3(ob.OSL), "hit", round3(ob.HitFrac),
		"ttft_ms", round3(ob.TTFTMs), "itl_ms", round3(ob.ITLMs), "queue", ob.QueueDepth, "samples", o.Samples)
	l.mu.Lock() // the planner is single-threaded; /health reads it too
	ds := p.Step(o)
	l.obs = ob
	l.mu.Unlock()
	ok := true
	for _, d := range ds {
		if d.Desired == d.Current {
			continue
		}
		if err := l.Actuator.Scale(ctx, d.Pool, d.Desired); err != nil {
			ok = false
			l.actuateFailed(fmt.Errorf("pool %s to %d: %w", d.Pool, d.Desired, err))
		}
	}
	if ok && l.Board != nil {
		l.Board.Clear(CodeActuateFailed, "planner", CodeActuated, "the planner's scale operations succeed again")
	}
	l.mu.Lock()
	l.last = ds
	if ok {
		l.err = ""
	}
	l.mu.Unlock()
	return ds
}

func (l *Loop) observeFailed(err error) {
	l.Planner.met.observeFail.Inc()
	l.setErr(err)
	if l.Board != nil {
		l.Board.Raise(CodeObserveFailed, "planner", health.Error, "the planner cannot read the frontend's metrics; pools are held: "+err.Error())
	} else {
		l.Planner.log.Error("planner observe failed", "err", err)
	}
}

func (l *Loop) actuateFailed(err error) {
	l.Planner.met.actuateFail.Inc()
	l.setErr(err)
	if l.Board != nil {
		l.Board.Raise(CodeActuateFailed, "planner", health.Error, "the planner cannot read or set pool sizes: "+err.Error())
	} else {
		l.Planner.log.Error("planner actuate failed", "err", err)
	}
}

func (l *Loop) setErr(err error) {
	l.mu.Lock()
	l.err = err.Error()
	l.mu.Unlock()
}

type healthBody struct {
	Status      string                `json:"status"`
	Policy      string                `json:"policy"`
	Decisions   []Decision            `json:"decisions"`
	Corrections map[string][2]float64 `json:"corrections"`
	Observed    *observed             `json:"observed,omitempty"`
	Error       string                `json:"error,omitempty"`
	Diagnostics []health.Diagnostic   `json:"diagnostics,omitempty"`
}

// ServeHealth is the planner's /health: its last decisions with their
// reasons, the correction factors, and active diagnostics (status
// "degraded", still 200, while any is active).
func (l *Loop) ServeHealth(w http.ResponseWriter, _ *http.Request) {
	l.mu.Lock()
	ds := make([]Decision, len(l.last))
	for i, d := range l.last {
		// JSON has no NaN or Inf: an unsizable prediction shows as 0.
		for _, v := range []*float64{&d.PredTTFTMs, &d.PredITLMs, &d.Predicted.Rate, &d.Predicted.ISL, &d.Predicted.OSL,
			&d.Predicted.HitFrac, &d.Predicted.ISLTail, &d.Predicted.Window} {
			if !usable(*v) {
				*v = 0
			}
		}
		ds[i] = d
	}
	b := healthBody{Status: "ok", Policy: l.Planner.cfg.Policy.Name(), Decisions: ds, Error: l.err,
		Corrections: l.Planner.Corrections(), Observed: l.obs}
	l.mu.Unlock()
	if l.Board != nil {
		b.Diagnostics = l.Board.Active()
	}
	if len(b.Diagnostics) > 0 {
		b.Status = "degraded"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(b)
}
