package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemllm/tandem/health"
)

func quietFile(t *testing.T, dir string, board *health.Board) *File {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	if board == nil {
		board = health.NewBoard(log, nil)
	}
	f, err := NewFile(FileConfig{Dir: dir, PollInterval: 20 * time.Millisecond,
		Common: Common{TTL: 3 * time.Second, Board: board, Logger: log}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// exitedPID returns the pid of a process that has exited.
func exitedPID(t *testing.T) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Skip("no `true` command:", err)
	}
	return c.Process.Pid
}

// Finding 6 of issue 12: a corrupted, truncated, foreign or deleted record
// took its worker out for good, and a removed directory was never
// recreated. The owner now writes its record back within a poll, and the
// watcher keeps the worker meanwhile: it never leaves.
func TestFileRecordsHeal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "disc")
	f := quietFile(t, dir, nil)
	if _, err := f.Register(context.Background(), testRecord("w1")); err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, f)
	w.waitFor(5*time.Second, "w1 live", func() bool { return len(w.live) == 1 })
	p := filepath.Join(dir, "w1.json")
	good, _ := os.ReadFile(p)
	foreign, _ := json.Marshal(fileEntry{Record: func() Record { r := testRecord("w1"); r.RequestPlane = "10.6.6.6:1"; return r }(),
		Host: f.host, PID: exitedPID(t), Instance: "stranger", TTLMs: 60_000})
	spoil := []struct {
		name string
		do   func() error
	}{
		{"truncated", func() error { return os.WriteFile(p, good[:len(good)/2], 0o600) }},
		{"corrupted", func() error { return os.WriteFile(p, []byte("\x00garbage"), 0o600) }},
		{"emptied", func() error { return os.WriteFile(p, nil, 0o600) }},
		{"foreign instance", func() error { return os.WriteFile(p, foreign, 0o600) }},
		{"deleted", func() error { return os.Remove(p) }},
		// Made beside the record and renamed over it: a remove-then-create
		// would race with the owner's rewrite.
		{"replaced by a FIFO", func() error {
			if err := syscall.Mkfifo(p+".fifo", 0o600); err != nil {
				return err
			}
			return os.Rename(p+".fifo", p)
		}},
		{"replaced by a symlink to /dev/zero", func() error {
			if err := os.Symlink("/dev/zero", p+".link"); err != nil {
				return err
			}
			return os.Rename(p+".link", p)
		}},
		// Renamed away first: rm -rf would race with the owner's rewrite.
		{"directory removed", func() error {
			if err := os.Rename(dir, dir+".gone"); err != nil {
				return err
			}
			return os.RemoveAll(dir + ".gone")
		}},
	}
	for _, s := range spoil {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		start := time.Now()
		for {
			b, _, err := readRecord(p, f.uid) // never blocks on a FIFO
			if err == nil && string(b) == string(good) {
				break
			}
			if time.Since(start) > 20*time.Second { // generous: a loaded machine
				t.Fatalf("%s: record not rewritten (%v)", s.name, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("%s: rewritten after %v", s.name, time.Since(start).Round(time.Millisecond))
		time.Sleep(60 * time.Millisecond) // a few polls of the watcher
	}
	if n := w.count(EventDelete, "w1"); n != 0 {
		t.Fatalf("the watcher dropped w1 %d times while its owner ran", n)
	}
	w.mu.Lock()
	for _, e := range w.events {
		if e.Type == EventPut && e.Record.RequestPlane != "127.0.0.1:4000" {
			t.Errorf("the watcher routed w1 to %s", e.Record.RequestPlane)
		}
	}
	w.mu.Unlock()
	if info, err := os.Stat(dir); err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("recreated directory: %v %v", info.Mode(), err)
	}
}

// A worker that deregisters leaves at once (its tombstone says so); one
// whose process is gone leaves at once too, record or not.
func TestFileRevokedLeavesAtOnce(t *testing.T) {
	f := quietFile(t, t.TempDir(), nil)
	l, err := f.Register(context.Background(), testRecord("w1"))
	if err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, f)
	w.waitFor(5*time.Second, "w1 live", func() bool { return len(w.live) == 1 })
	start := time.Now()
	l.Revoke(context.Background())
	w.waitFor(time.Second, "w1 gone", func() bool { return len(w.live) == 0 })
	if d := time.Since(start); d > f.missingGrace() {
		t.Fatalf("a revoked worker took %v to leave (grace %v)", d, f.missingGrace())
	}
}

// Finding 6 of issue 12: a symlink to /dev/zero drove the frontend's
// memory up without bound, a FIFO froze discovery, a large file cost more
// than its size, and every junk file made a diagnostic and a series
// (docs/benchmarks.md has the figures). None of them is read now;
// they are counted in one metric and one diagnostic.
func TestFileJunkIsNeverRead(t *testing.T) {
	dir := t.TempDir()
	board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
	f := quietFile(t, dir, board)
	if _, err := f.Register(context.Background(), testRecord("w1")); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("/dev/zero", filepath.Join(dir, "z.json")))
	must(syscall.Mkfifo(filepath.Join(dir, "x.json"), 0o600))
	must(os.Mkdir(filepath.Join(dir, "d.json"), 0o700))
	big, err := os.Create(filepath.Join(dir, "big.json"))
	must(err)
	must(big.Truncate(200 << 20)) // sparse: costs no disk
	big.Close()
	const flood = 5000
	for i := range flood {
		must(os.WriteFile(filepath.Join(dir, fmt.Sprintf("junk-%04d.txt", i)), []byte("x"), 0o600))
	}
	st := newScanState()
	start := time.Now()
	recs, err := f.scan(st)
	first := time.Since(start)
	must(err)
	start = time.Now()
	_, err = f.scan(st)
	second := time.Since(start)
	must(err)
	if len(recs) != 1 {
		t.Fatalf("live %v, want w1", recs)
	}
	want := float64(flood + 4)
	if got := testutil.ToFloat64(f.junk); got != want {
		t.Fatalf("junk metric %v, want %v", got, want)
	}
	var junkDiags int
	var msg string
	for _, d := range board.Active() {
		if d.Code == DiagJunk {
			junkDiags++
			msg = d.Message
		}
	}
	if junkDiags != 1 || len(msg) > 1024 || !strings.Contains(msg, "5004 files") {
		t.Fatalf("%d junk diagnostics, message of %d bytes: %.300s", junkDiags, len(msg), msg)
	}
	t.Logf("scan of %d junk files: %v, then %v", flood+4, first, second)
}

// Routing hijack: whoever can write the discovery directory can point a
// worker id at their own address. The directory is created 0700; one owned
// by another user or writable by others is refused; a record file owned
// by another user is ignored.
func TestFileRoutingHijackRefused(t *testing.T) {
	root := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	open := func(dir string) error {
		f, err := NewFile(FileConfig{Dir: dir, Common: Common{Logger: log}})
		if err == nil {
			f.Close()
		}
		return err
	}
	fresh := filepath.Join(root, "a", "b")
	if err := open(fresh); err != nil {
		t.Fatal(err)
	}
	if info, _ := os.Stat(fresh); info.Mode().Perm() != 0o700 {
		t.Fatalf("created %v, want 0700", info.Mode().Perm())
	}
	shared := filepath.Join(root, "shared")
	os.Mkdir(shared, 0o777)
	os.Chmod(shared, 0o777) // past the umask
	if err := open(shared); err == nil || !strings.Contains(err.Error(), "writable by other users") {
		t.Fatalf("a world-writable directory: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("the foreign-owner cases need root to chown")
	}
	const stranger = 65534
	theirs := filepath.Join(root, "theirs")
	os.Mkdir(theirs, 0o700)
	if err := os.Chown(theirs, stranger, stranger); err != nil {
		t.Fatal(err)
	}
	if err := open(theirs); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("a directory owned by another user: %v", err)
	}

	dir := filepath.Join(root, "ours")
	f := quietFile(t, dir, nil)
	if _, err := f.Register(context.Background(), testRecord("w1")); err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, f)
	w.waitFor(5*time.Second, "w1 live", func() bool { return len(w.live) == 1 })
	evil := testRecord("w1")
	evil.RequestPlane = "10.6.6.6:1"
	for _, name := range []string{"w1.json", "evil.json"} {
		evil.ID = strings.TrimSuffix(name, ".json")
		b, _ := json.Marshal(fileEntry{Record: evil, Host: f.host, PID: os.Getpid(), Instance: "stranger", TTLMs: 60_000})
		tmp := filepath.Join(dir, ".plant")
		os.WriteFile(tmp, b, 0o644)
		if err := os.Chown(tmp, stranger, stranger); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.events {
		if e.Type == EventPut && e.Record.RequestPlane != "127.0.0.1:4000" {
			t.Errorf("a stranger's record was routed: %+v", e.Record)
		}
	}
	if _, ok := w.live["evil"]; ok {
		t.Error("a stranger's new worker id is live")
	}
	if _, ok := w.live["w1"]; !ok {
		t.Error("w1 left when a stranger overwrote its record")
	}
}

// FuzzFileRecord: no record file content makes a watcher panic, and a
// file is either a valid record of its name, a tombstone, or refused.
func FuzzFileRecord(f *testing.F) {
	good, _ := json.Marshal(fileEntry{Record: testRecord("w1"), PID: 1, Instance: "x"})
	for _, s := range []string{string(good), "", "{", "null", `{"record":{"id":"w1"}}`, `{"revoked":true}`, "\x00\xff"} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	fl, err := NewFile(FileConfig{Dir: dir, Common: Common{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		f.Fatal(err)
	}
	p := filepath.Join(dir, "w1.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		e, err := fl.readEntry(p, "w1")
		if err == nil && !e.Revoked && (e.Record.ID != "w1" || e.Record.Validate() != nil) {
			t.Fatalf("accepted %q as %+v", b, e.Record)
		}
		if len(b) > MaxRecordBytes && err == nil {
			t.Fatalf("accepted a %d-byte record", len(b))
		}
	})
}
