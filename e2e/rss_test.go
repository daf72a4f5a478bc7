//go:build rss

package e2e

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// The rss tag: TestSlowBodiesRSS uses about a gigabyte of memory for a
// moment, too much for every go test run.

// TestSlowBodiesRSS (built with the rss tag: go test -tags rss -run
// TestSlowBodiesRSS ./e2e) measures finding 3 of issue 12:
// 100 slow clients each sending an almost-8 MB body. It starts `tandem
// serve` twice in the same run, without a body budget (the old behaviour)
// and with the default one, and reports the peak RSS of each.
func TestSlowBodiesRSS(t *testing.T) {
	const clients, size = 100, 8<<20 - 4096
	run := func(flags string) (base, peak int64, refused int) {
		p := startProc(t, "serve", "serve --workers 1 --http-addr 127.0.0.1:0 "+flags, frontendReady)
		addr := strings.TrimPrefix(p.line, "http://")
		time.Sleep(300 * time.Millisecond)
		base = procRSS(p.cmd.Process.Pid)
		chunk := bytes.Repeat([]byte("a"), 64<<10)
		var wg sync.WaitGroup
		var mu sync.Mutex
		conns := make(chan func(), clients)
		for range clients {
			wg.Go(func() {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				conns <- func() { c.Close() }
				fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size)
				c.SetWriteDeadline(time.Now().Add(20 * time.Second))
				for sent := 0; sent+len(chunk) < size-1024; sent += len(chunk) {
					if _, err := c.Write(chunk); err != nil {
						mu.Lock()
						refused++ // the server answered 503 and closed
						mu.Unlock()
						return
					}
				}
				// Hold the last KiB: a slow client that never finishes.
			})
		}
		wg.Wait()
		time.Sleep(500 * time.Millisecond)
		peak = procRSS(p.cmd.Process.Pid)
		close(conns)
		for c := range conns {
			c()
		}
		p.cmd.Process.Kill()
		return base, peak, refused
	}
	b0, p0, r0 := run("--body-budget-bytes 0")
	b1, p1, r1 := run("")
	t.Logf("%d clients × %.1f MB bodies, held: no budget: RSS %.0f -> %.0f MB (%d refused); default 256 MiB budget: RSS %.0f -> %.0f MB (%d refused); ratio %.2f",
		clients, float64(size)/(1<<20), float64(b0)/(1<<20), float64(p0)/(1<<20), r0, float64(b1)/(1<<20), float64(p1)/(1<<20), r1,
		float64(p1-b1)/float64(max(1, p0-b0)))
	if p1-b1 > 400<<20 {
		t.Errorf("with the budget RSS grew %.0f MB", float64(p1-b1)/(1<<20))
	}
}
