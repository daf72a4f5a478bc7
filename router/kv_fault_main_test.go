package router

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tandemllm/tandem/planes/kvevents"
)

// publisherEnv names, for the test binary run as a publisher process
// (TestMain), the bound endpoint it dials, its topic and its first block
// hash: "endpoint topic base".
const publisherEnv = "TANDEM_ROUTER_TEST_PUBLISHER"

// TestMain runs the binary as a KV event publisher process when
// publisherEnv is set (the fault suite's publishers are processes, so
// killing one is a real process dying: the kernel closes its connection
// mid-stream), else the tests.
func TestMain(m *testing.M) {
	if spec := os.Getenv(publisherEnv); spec != "" {
		os.Exit(runPublisherProcess(spec))
	}
	os.Exit(m.Run())
}

// runPublisherProcess publishes a BlockStored batch every 2 ms until
// SIGTERM (it then closes its socket as a publisher that is stopped
// does), its stdin closes (the test is gone) or two minutes pass.
func runPublisherProcess(spec string) int {
	var ep, topic, baseS string
	if _, err := fmt.Sscan(spec, &ep, &topic, &baseS); err != nil {
		fmt.Fprintln(os.Stderr, "publisher:", err)
		return 2
	}
	base, err := strconv.ParseUint(baseS, 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "publisher:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	p, err := kvevents.NewPublisher(ctx, kvevents.PublisherConfig{Endpoint: ep, Dial: true, Topic: topic,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "publisher:", err)
		return 1
	}
	defer p.Close()
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for n := uint64(0); ; n++ {
		select {
		case <-ctx.Done():
			return 0
		case <-t.C:
		}
		ev := storedEvent(prompt(int(n%50), 1), base+n)
		p.Publish(kvevents.EncodeBatch(&kvevents.Batch{TS: float64(n), Events: []kvevents.Event{ev}}, kvevents.FormatMap))
	}
}
