package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestMigrationSIGKILL: a frontend with --migration-limit and 3 workers as
// separate OS processes under streaming load; one worker is SIGKILLed
// while it streams. Every stream, those cut on the dead worker included,
// must end with [DONE] and no error event: they continue on the others.
func TestMigrationSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes")
	}
	dir := filepath.Join(t.TempDir(), "disc")
	disc := "--discovery file --discovery-dir " + dir + " --lease-ttl 3s"
	fe := startProc(t, "frontend", "frontend --http-addr 127.0.0.1:0 --router-mode kv --max-retries 3 --migration-limit 3 "+disc, frontendReady)
	workers := map[string]*osProc{}
	for _, id := range []string{"w1", "w2", "w3"} {
		workers[id] = startProc(t, id, "worker --id "+id+" --speedup 4 --deregister-delay 0s "+disc, workerReady)
	}
	waitHealthy(t, fe.line, 3, 20*time.Second)
	stop := startLoad(fe.line, 12, func(i, n int) (string, int) {
		return fmt.Sprintf("client %d asks question %d", i, n), 48
	})
	// The victim must hold a stream when it dies: on a loaded runner the
	// router can leave a worker idle for a moment, so if no stream
	// migrated after the first kill, a second worker is killed too.
	kills := map[string]time.Time{}
	for _, victim := range []string{"w1", "w2"} {
		time.Sleep(1500 * time.Millisecond)
		kills[victim] = time.Now()
		if err := workers[victim].cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		if metricSum(getBody(t, fe.line+"/metrics"), `tandem_frontend_migrations_total{model="tandem-mock",result="ok"}`) > 0 {
			break
		}
	}
	outs := stop()
	broken, onVictim := 0, 0
	for _, o := range outs {
		if killed, ok := kills[o.worker]; ok && o.start.Before(killed) && o.end.After(killed) {
			onVictim++
		}
		if o.cut || o.err != nil {
			broken++
			t.Logf("broken: worker %s started %v cut %v err %v", o.worker, o.started, o.cut, o.err)
		}
	}
	migrated := metricSum(getBody(t, fe.line+"/metrics"), `tandem_frontend_migrations_total{model="tandem-mock",result="ok"}`)
	t.Logf("%d streams, %d in flight on the killed workers (%d killed), %v migrated, %d broken", len(outs), onVictim, len(kills), migrated, broken)
	if broken != 0 || onVictim == 0 || migrated == 0 {
		t.Fatalf("%d broken of %d streams (%d in flight on the killed worker, %v migrated)", broken, len(outs), onVictim, migrated)
	}
}
