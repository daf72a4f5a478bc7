package upstream_test

import (
	"testing"

	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/engine/upstream"
	"github.com/tandemllm/tandem/engine/upstream/standin"
)

// TestFleetSGLang: an SGLang server with two attention-DP ranks
// is two workers; rank 1's events are at the endpoint's port + 1.
func TestFleetSGLang(t *testing.T) {
	cfg := mocker.DefaultConfig()
	cfg.Instant, cfg.KVEvents.Enabled = true, false
	srv, err := standin.StartSGLang(standin.SGLangOptions{Model: "m", Mocker: cfg, DPSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	u := upstream.Fleet{URLs: []string{srv.URL()}, API: upstream.APISGLang, Events: []string{"tcp://sglang-0:5557"},
		Replay: []string{"tcp://sglang-0:5600"}, Prefill: []string{"http://p:1"}}
	if err := u.ResolveTargets(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if u.Workers() != 2 {
		t.Fatalf("%d workers", u.Workers())
	}
	c, err := u.Config(1)
	if err != nil || c.DPRank != 1 || c.KVEventsEndpoint != "tcp://sglang-0:5558" || c.KVEventsReplayEndpoint != "tcp://sglang-0:5601" {
		t.Fatalf("worker 1: %+v %v", c, err)
	}
	if c, err := u.Config(2); err != nil || c.URL != "http://p:1" {
		t.Fatalf("prefill worker: %+v %v", c, err)
	}
	u.Events = []string{"topic:sglang"}
	if err := u.ResolveTargets(t.Context(), nil); err == nil {
		t.Fatal("a bound-socket topic for a DP server was accepted")
	}
}
