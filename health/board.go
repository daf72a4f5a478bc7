package health

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Severity ranks a diagnostic. Error means a request path is degraded
// (routing quality, lost capacity); Warn means something to look at.
type Severity string

const (
	Warn  Severity = "warn"
	Error Severity = "error"
)

// Diagnostic is one active degraded state.
type Diagnostic struct {
	Code     string    `json:"code"`
	Severity Severity  `json:"severity"`
	Subject  string    `json:"subject,omitempty"` // the worker, link or component it concerns
	Message  string    `json:"message"`
	Since    time.Time `json:"since"`
}

type key struct{ code, subject string }

// Board is safe for concurrent use.
type Board struct {
	log    *slog.Logger
	active *prometheus.GaugeVec
	raised *prometheus.CounterVec

	mu sync.Mutex
	m  map[key]Diagnostic
}

// NewBoard registers its metrics on reg (which may be nil in tests).
func NewBoard(log *slog.Logger, reg prometheus.Registerer) *Board {
	b := &Board{
		log: log,
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_diagnostic_active",
			Help: "1 while the diagnostic code is active for the subject.",
		}, []string{"code", "subject"}),
		raised: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_diagnostic_raised_total",
			Help: "Times a diagnostic code went from clear to active.",
		}, []string{"code"}),
		m: map[key]Diagnostic{},
	}
	if reg != nil {
		reg.MustRegister(b.active, b.raised)
	}
	return b
}

// Raise marks code active for subject. Only the transition to active logs, so
// a state re-detected on every request does not flood the log; the message
// is updated either way.
func (b *Board) Raise(code, subject string, sev Severity, msg string, attrs ...any) {
	k := key{code, subject}
	b.mu.Lock()
	d, was := b.m[k]
	if !was {
		d = Diagnostic{Code: code, Subject: subject, Since: time.Now()}
	}
	d.Severity, d.Message = sev, msg
	b.m[k] = d
	b.mu.Unlock()
	if was {
		return
	}
	b.active.WithLabelValues(code, subject).Set(1)
	b.raised.WithLabelValues(code).Inc()
	level := slog.LevelWarn
	if sev == Error {
		level = slog.LevelError
	}
	b.log.Log(context.Background(), level, msg, append([]any{"diagnostic_code", code, "subject", subject}, attrs...)...)
}

// Clear ends code for subject. If it was active, recoveryCode (when not
// empty) is logged at INFO so operators see when the state ended.
func (b *Board) Clear(code, subject, recoveryCode, msg string) {
	k := key{code, subject}
	b.mu.Lock()
	d, was := b.m[k]
	delete(b.m, k)
	b.mu.Unlock()
	if !was {
		return
	}
	b.active.DeleteLabelValues(code, subject)
	if recoveryCode != "" {
		b.log.Info(msg, "diagnostic_code", recoveryCode, "subject", subject, "degraded_for", time.Since(d.Since).Round(time.Millisecond))
	}
}

// ClearSubject drops every diagnostic about subject (a worker that left).
func (b *Board) ClearSubject(subject string) {
	b.mu.Lock()
	var gone []key
	for k := range b.m {
		if k.subject == subject {
			gone = append(gone, k)
		}
	}
	for _, k := range gone {
		delete(b.m, k)
	}
	b.mu.Unlock()
	for _, k := range gone {
		b.active.DeleteLabelValues(k.code, k.subject)
	}
}

// Active returns the active diagnostics, ordered by code then subject.
func (b *Board) Active() []Diagnostic {
	b.mu.Lock()
	out := make([]Diagnostic, 0, len(b.m))
	for _, d := range b.m {
		out = append(out, d)
	}
	b.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Code != out[j].Code {
			return out[i].Code < out[j].Code
		}
		return out[i].Subject < out[j].Subject
	})
	return out
}

// IsActive reports whether code is active for subject.
func (b *Board) IsActive(code, subject string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.m[key{code, subject}]
	return ok
}

// Reporter is implemented by parts that watch something outside their
// process (an upstream server an engine fronts) and report its degraded
// states on whichever board the hosting process owns.
type Reporter interface {
	AttachBoard(b *Board, subject string)
}

// Attach gives v the board, under subject, if v is a Reporter.
func Attach(v any, b *Board, subject string) {
	if r, ok := v.(Reporter); ok {
		r.AttachBoard(b, subject)
	}
}
