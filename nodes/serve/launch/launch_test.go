package launch

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine/engines"
	"github.com/tandemllm/tandem/engine/mocker"
)

// TestServeAndModeStarter: a Setup with the mocker starts a system that
// answers /v1/models over HTTP and stops; ModeStarter starts one per
// router mode; an --upstream-prefill without --engine upstream and a bad
// --router-cost are refused before anything starts.
func TestServeAndModeStarter(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	get := func(url string) string {
		t.Helper()
		c := &http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get(url + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return string(b)
	}
	s := New()
	s.Config.HTTPAddr, s.Config.Workers = "127.0.0.1:0", 2
	setMocker(&s.Engine)
	if r := s.Resources(); r["workers"] != 2 || r["kv_capacity_tokens"] <= 0 {
		t.Errorf("resources %v", r)
	}
	url, stop, err := Serve(t.Context(), log, s)
	if err != nil {
		t.Fatal(err)
	}
	if body := get(url); !strings.Contains(body, "tandem-mock") {
		t.Errorf("/v1/models: %s", body)
	}
	stop()
	if s.Config.RouterMode != s.Router.Mode {
		t.Errorf("router mode %q, settings %q", s.Config.RouterMode, s.Router.Mode)
	}

	url, stop, err = ModeStarter(log, 1, 16384, 20)(context.Background(), "round-robin")
	if err != nil {
		t.Fatal(err)
	}
	if body := get(url); !strings.Contains(body, "tandem-mock") {
		t.Errorf("/v1/models: %s", body)
	}
	stop()

	bad := New()
	setMocker(&bad.Engine)
	bad.Engine.Up.Prefill = []string{"http://127.0.0.1:1"}
	if _, _, err := bad.Start(log); err == nil || !strings.Contains(err.Error(), "--upstream-prefill") {
		t.Errorf("prefill without upstream: %v", err)
	}
}

func setMocker(c *engines.Config) {
	c.Kind, c.Mock, c.Timing, c.KVEvents, c.KVFormat = "mocker", mocker.DefaultConfig(), "dynamo", "on", "map"
	c.Mock.Instant = true
	c.Mock.KVEvents.Endpoint = "tcp://127.0.0.1:0"
}
