package local

import (
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

func shell(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	return p
}

// TestSupervisor runs real processes: growth starts them, shrinking
// SIGTERMs the newest and waits, one that ignores SIGTERM is killed after
// StopTimeout with an error, one that exits on its own is not counted.
func TestSupervisor(t *testing.T) {
	sh := shell(t)
	s := &Supervisor{Binary: sh, StopTimeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler), Pools: map[string]Pool{
		// exec so SIGTERM reaches sleep, whose default action ends it.
		"polite":   {Args: []string{"-c", "exec sleep 60"}},
		"stubborn": {Args: []string{"-c", "trap '' TERM; while :; do sleep 0.05; done"}},
		"brief":    {Args: []string{"-c", "exit 0"}},
	}}
	ctx := context.Background()
	t.Cleanup(func() { _ = s.Close(ctx) })
	if err := s.Scale(ctx, "polite", 3); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Replicas(ctx); n["polite"] != 3 {
		t.Fatalf("replicas %v, want polite 3", n)
	}
	if err := s.Scale(ctx, "polite", 1); err != nil {
		t.Fatalf("polite workers did not stop on SIGTERM: %v", err)
	}
	if n, _ := s.Replicas(ctx); n["polite"] != 1 {
		t.Fatalf("replicas %v, want polite 1", n)
	}
	if err := s.Scale(ctx, "stubborn", 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the shell install its trap
	err := s.Scale(ctx, "stubborn", 0)
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("a worker ignoring SIGTERM: %v, want killed after StopTimeout", err)
	}
	if err := s.Scale(ctx, "brief", 1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if n, _ := s.Replicas(ctx); n["brief"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an exited worker is still counted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, tc := range []struct {
		pool string
		n    int
	}{{"nope", 1}, {"polite", -1}, {"polite", maxWorkers + 1}} {
		if err := s.Scale(ctx, tc.pool, tc.n); err == nil {
			t.Errorf("Scale(%s, %d) accepted", tc.pool, tc.n)
		}
	}
}

// TestSupervisorTemplates: {n} and {id} are filled in each worker's
// arguments and environment.
func TestSupervisorTemplates(t *testing.T) {
	sh := shell(t)
	out := &syncWriter{b: &strings.Builder{}}
	s := &Supervisor{Binary: sh, Output: out, Logger: slog.New(slog.DiscardHandler), Pools: map[string]Pool{
		"p": {Args: []string{"-c", `echo "n={n} id=$WID"; exec sleep 60`}, Env: []string{"WID={id}"}}}}
	ctx := context.Background()
	t.Cleanup(func() { _ = s.Close(ctx) })
	if err := s.Scale(ctx, "p", 2); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !(strings.Contains(out.String(), "n=0 id=p-0") && strings.Contains(out.String(), "n=1 id=p-1")) {
		if time.Now().After(deadline) {
			t.Fatalf("output %q", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
