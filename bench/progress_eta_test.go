package bench

import (
	"strings"
	"sync"
	"testing"
)

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// TestProgressETA: a plain progress line of a run with a known size says
// which part of a larger run it is and the time left.
func TestProgressETA(t *testing.T) {
	var buf syncBuf
	p := &Progress{W: &buf}
	r := p.begin("[run 2/4: mode kv, trial 1/2] prefix-reuse", 10, 0)
	for range 5 {
		r.add(true)
	}
	r.draw(false)
	r.end()
	buf.mu.Lock()
	out := buf.b.String()
	buf.mu.Unlock()
	if !strings.Contains(out, "[run 2/4: mode kv, trial 1/2] prefix-reuse: 5/10 req") || !strings.Contains(out, "ETA ") {
		t.Fatalf("progress:\n%s", out)
	}
}
