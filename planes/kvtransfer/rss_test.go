package kvtransfer

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine/mocker"
)

const (
	rssTransfers  = 8
	rssTokens     = 1500
	rssBudget     = 128 << 20 // per node; the child runs two (sender, receiver)
	rssChildEnv   = "KVTRANSFER_RSS_CHILD"
	rssBlockSize  = 16
	rssTokenBytes = mocker.DefaultKVBytesPerToken
)

// TestTransferMemoryRSS runs 8 concurrent 1,500-token transfers of
// Qwen3-0.6B-sized KV (114,688 B/token: 8 × 172 MB ≈ 1.38 GB) in a child
// process and checks its peak RSS (VmHWM) stays within the two nodes'
// budgets above a baseline child that sets up the same engines and moves
// one block. Slow-ish (a few seconds), so it runs in CI but not under -race,
// whose shadow memory would swamp the measurement.
func TestTransferMemoryRSS(t *testing.T) {
	if mode := os.Getenv(rssChildEnv); mode != "" {
		rssChild(t, mode)
		return
	}
	if raceEnabled {
		t.Skip("RSS is not meaningful under the race detector")
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc/self/status (Linux)")
	}
	base := runRSSChild(t, "baseline")
	load := runRSSChild(t, "load")
	limit := base.hwm + 2*rssBudget
	t.Logf("baseline VmHWM %.1f MiB; 8×1500-token transfers (%.2f GB) VmHWM %.1f MiB; limit baseline + 2×%d MiB budget = %.1f MiB; budget peaks %d B; failed %d",
		mib(base.hwm), float64(rssTransfers*rssTokens*rssTokenBytes)/1e9, mib(load.hwm), rssBudget>>20, mib(limit), load.peak, load.failed)
	if load.failed != 0 {
		t.Fatalf("%d transfers failed", load.failed)
	}
	if load.hwm > limit {
		t.Fatalf("peak RSS %.1f MiB exceeds baseline + budgets %.1f MiB", mib(load.hwm), mib(limit))
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

type rssResult struct {
	hwm, peak int64
	failed    int
}

func runRSSChild(t *testing.T, mode string) rssResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTransferMemoryRSS$", "-test.v")
	cmd.Env = append(os.Environ(), rssChildEnv+"="+mode)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child %s: %v\n%s", mode, err, out)
	}
	var r rssResult
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	found := false
	for sc.Scan() {
		if _, err := fmt.Sscanf(strings.TrimSpace(sc.Text()), "RSSRESULT %d %d %d", &r.hwm, &r.peak, &r.failed); err == nil {
			found = true
		}
	}
	if !found {
		t.Fatalf("child %s printed no result:\n%s", mode, out)
	}
	return r
}

func rssChild(t *testing.T, mode string) {
	testNodeTimeout = 2 * time.Minute // memory, not speed, is measured here
	src, dst := newMocker(t, rssTokenBytes), newMocker(t, rssTokenBytes)
	a := newNode(t, "p0", src, rssBudget, nil, false)
	b := newNode(t, "d0", dst, rssBudget, nil, true)
	n, size := rssTransfers, rssTokens/rssBlockSize*rssBlockSize
	if mode == "baseline" {
		n, size = 1, rssBlockSize
	}
	var failed atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		p := prompt(size+1, 1000+i)
		prefill(t, src, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := a.Send(context.Background(), Peer{ID: "d0", Addr: b.Addr()}, p[:size], 0); err != nil {
				t.Log(err)
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	peak := max(a.Budget().Stats().Peak, b.Budget().Stats().Peak)
	fmt.Printf("RSSRESULT %d %d %d\n", vmHWM(t), peak, failed.Load())
}

func vmHWM(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}
