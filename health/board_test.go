package health

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRaiseLogsOnceAndClearLogsRecovery(t *testing.T) {
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	b := NewBoard(slog.New(slog.NewTextHandler(&logs, nil)), reg)

	b.Raise("kv_events_missing", "w1", Error, "no events")
	b.Raise("kv_events_missing", "w1", Error, "still no events")
	if n := strings.Count(logs.String(), "diagnostic_code=kv_events_missing"); n != 1 {
		t.Fatalf("logged %d times, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("want ERROR level: %s", logs.String())
	}
	if got := testutil.ToFloat64(b.active.WithLabelValues("kv_events_missing", "w1")); got != 1 {
		t.Fatalf("gauge = %v", got)
	}
	act := b.Active()
	if len(act) != 1 || act[0].Message != "still no events" {
		t.Fatalf("active = %+v", act)
	}
	b.Clear("kv_events_missing", "w1", "kv_events_recovered", "events flow again")
	if !strings.Contains(logs.String(), "diagnostic_code=kv_events_recovered") {
		t.Fatalf("no recovery line: %s", logs.String())
	}
	if len(b.Active()) != 0 || b.IsActive("kv_events_missing", "w1") {
		t.Fatal("still active after Clear")
	}
	if n := testutil.CollectAndCount(b.active); n != 0 {
		t.Fatalf("gauge series left: %d", n)
	}
}

func TestClearSubject(t *testing.T) {
	b := NewBoard(slog.New(slog.DiscardHandler), nil)
	b.Raise("a", "w1", Warn, "x")
	b.Raise("b", "w1", Warn, "y")
	b.Raise("a", "w2", Warn, "z")
	b.ClearSubject("w1")
	act := b.Active()
	if len(act) != 1 || act[0].Subject != "w2" {
		t.Fatalf("active = %+v", act)
	}
}
