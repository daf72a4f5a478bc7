package fleet

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/disagg"
)

type decisions struct {
	mu   sync.Mutex
	seen []disagg.Decision
}

func (d *decisions) add(x disagg.Decision) {
	d.mu.Lock()
	d.seen = append(d.seen, x)
	d.mu.Unlock()
}

func (d *decisions) last(t *testing.T) disagg.Decision {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.seen) == 0 {
		t.Fatal("no disagg decision recorded")
	}
	return d.seen[len(d.seen)-1]
}

func waitDiag(t *testing.T, h *harness, code, subject string, want bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.fe.Board.IsActive(code, subject) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s: active = %v, want %v (%v)", code, subject, !want, want, h.fe.Board.Active())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDisaggAcrossWorkers: the frontend's orchestrator drives worker
// processes' parts over their request planes: it assesses the prompt on
// the decode and prefill workers, the prefill worker runs the leg and
// pushes the missing blocks to the decode worker's transfer node over TCP,
// and the decode worker then finds them cached.
func TestDisaggAcrossWorkers(t *testing.T) {
	var ds decisions
	h := newHarnessWith(t, "round-robin", func(c *Config) { c.Disagg = "always" }, Options{OnDecision: ds.add})
	h.startRole("d0", "decode", 100, nil)
	h.waitMembers("d0")
	waitDiag(t, h, DiagNoPrefill, "fleet", true)
	p0 := h.startRole("p0", "prefill", 100, nil)
	h.waitMembers("d0", "p0")
	waitDiag(t, h, DiagNoPrefill, "fleet", false)
	if got := h.fe.Disagg.PrefillWorkers(); len(got) != 1 || got[0] != "p0" {
		t.Fatalf("orchestrator's prefill workers %v, want [p0]", got)
	}

	prompt := strings.Repeat("A robot walked through the quiet city at night, counting the lights. ", 40)
	id, body, code := h.complete(prompt, 4)
	if code != 200 || id != "d0" || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("status %d from %q: %s", code, id, tail(body))
	}
	d := ds.last(t)
	if d.Choice != disagg.ChoiceRemote || d.PrefillWorker != "p0" || d.Fallback != "" || d.TransferBytes == 0 {
		t.Fatalf("not served disaggregated: %+v", d)
	}
	if d.MissingBlocks != (d.PromptTokens-1)/16 {
		t.Fatalf("moved %d blocks of a fresh %d-token prompt", d.MissingBlocks, d.PromptTokens)
	}

	// The blocks landed in the decode worker's cache: the same prompt
	// again has nothing to move.
	if _, _, code := h.complete(prompt, 2); code != 200 {
		t.Fatalf("status %d", code)
	}
	if d := ds.last(t); d.Choice != disagg.ChoiceLocal || d.Reason != disagg.ReasonNothingToMove || d.LocalUncached > 16 {
		t.Fatalf("repeat: %+v", d)
	}

	// The prefill worker leaves: requests are prefilled locally, and the
	// degraded state is on /health.
	if err := p0.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.waitMembers("d0")
	waitDiag(t, h, DiagNoPrefill, "fleet", true)
	if _, _, code := h.complete("a new prompt "+prompt, 2); code != 200 {
		t.Fatalf("status %d", code)
	}
	if d := ds.last(t); d.Choice != disagg.ChoiceLocal || d.Reason != disagg.ReasonNoPrefill {
		t.Fatalf("without a prefill worker: %+v", d)
	}
}

// TestDisaggPrefillUnreachable: a prefill worker whose record outlives it
// is passed over by the decider, and the request is prefilled locally.
func TestDisaggPrefillUnreachable(t *testing.T) {
	var ds decisions
	h := newHarnessWith(t, "round-robin", func(c *Config) { c.Disagg = "always" }, Options{OnDecision: ds.add})
	h.startRole("d0", "decode", 100, nil)
	p0 := h.startRole("p0", "prefill", 100, nil)
	h.waitMembers("d0", "p0")
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ghost := p0.Record()
	ghost.ID, ghost.RequestPlane = "p1", dead.Addr().String()
	_ = dead.Close()
	h.fe.admit(ghost)
	if err := p0.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.waitMembers("d0", "p1")
	prompt := strings.Repeat("The lighthouse keeper wrote a letter to the sea. ", 30)
	if id, body, code := h.complete(prompt, 3); code != 200 || id != "d0" {
		t.Fatalf("status %d from %q: %s", code, id, tail(body))
	}
	if d := ds.last(t); d.Choice != disagg.ChoiceLocal || d.Reason != disagg.ReasonNoPrefill {
		t.Fatalf("decision with only a dead prefill worker: %+v", d)
	}
}
