package discovery

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
)

// A file registry hands its junk-file count to the frontend through
// engine.MetricsCollector (discovery sits beside engine, so only a test may
// import it).
var _ engine.MetricsCollector = (*File)(nil)

// TestFileLiveness covers the ways a record file stops counting: its
// owner's process is gone (exited, or killed and not yet reaped), or it was
// not refreshed for its TTL; and a record another host wrote, whose process
// cannot be checked from here, stays until its TTL.
func TestFileLiveness(t *testing.T) {
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Skip("no `true` command:", err)
	}
	zombie := exec.Command("sleep", "60")
	if err := zombie.Start(); err != nil {
		t.Skip("no `sleep` command:", err)
	}
	_ = zombie.Process.Kill()
	t.Cleanup(func() { _ = zombie.Wait() })
	time.Sleep(50 * time.Millisecond) // the kernel makes it a zombie
	host, _ := os.Hostname()

	cases := []struct {
		name  string
		host  string
		pid   int
		age   time.Duration
		ttlMs int64
		live  bool
	}{
		{"fresh, own process", host, os.Getpid(), 0, 10_000, true},
		{"process exited", host, exited.Process.Pid, 0, 10_000, false},
		{"process killed, not reaped", host, zombie.Process.Pid, 0, 10_000, false},
		{"stale heartbeat", host, os.Getpid(), 11 * time.Second, 10_000, false},
		{"other host, fresh", "elsewhere", exited.Process.Pid, 5 * time.Second, 10_000, true},
		{"other host, stale", "elsewhere", os.Getpid(), 3 * time.Second, 2_000, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			f, err := NewFile(FileConfig{Dir: dir, Common: Common{Logger: slog.New(slog.DiscardHandler)}})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(fileEntry{Record: testRecord("w1"), Host: c.host, PID: c.pid, Instance: "x", TTLMs: c.ttlMs})
			p := filepath.Join(dir, "w1.json")
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			mt := time.Now().Add(-c.age)
			if err := os.Chtimes(p, mt, mt); err != nil {
				t.Fatal(err)
			}
			recs, err := f.scan(newScanState())
			if err != nil {
				t.Fatal(err)
			}
			if _, live := recs["w1"]; live != c.live {
				t.Fatalf("live = %v, want %v", live, c.live)
			}
		})
	}
}

// TestFileInvalidRecords: broken files raise one discovery_junk_files and
// one discovery_record_invalid for the directory (the workers are ignored,
// not the directory), counted in one metric; both clear when the files are
// fixed or gone.
func TestFileInvalidRecords(t *testing.T) {
	dir := t.TempDir()
	board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
	f, err := NewFile(FileConfig{Dir: dir, Common: Common{Board: board, Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	good, _ := json.Marshal(fileEntry{Record: testRecord("w1"), PID: os.Getpid(), Instance: "x"})
	wrongName, _ := json.Marshal(fileEntry{Record: testRecord("w3"), Instance: "x"})
	files := []struct {
		name, content string
		junk          bool
	}{
		{"w1.json", string(good), false},
		{"w2.json", "{not json", true},
		{"w4.json", string(wrongName), true},
		{".w5.json.tmp-1", "{partial", false},
		{"notes.txt", "hello", true},
	}
	for _, fl := range files {
		if err := os.WriteFile(filepath.Join(dir, fl.name), []byte(fl.content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st := newScanState()
	recs, err := f.scan(st)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("live %v, want only w1", recs)
	}
	subject := "file:" + dir
	if !board.IsActive(DiagRecordInvalid, subject) || !board.IsActive(DiagJunk, subject) {
		t.Fatalf("diagnostics %+v", board.Active())
	}
	if n := len(board.Active()); n != 2 {
		t.Fatalf("%d diagnostics, want one of each code for the directory: %+v", n, board.Active())
	}
	for _, fl := range files {
		if _, ok := st.junk[fl.name]; ok != fl.junk {
			t.Errorf("%s: junk %v, want %v", fl.name, ok, fl.junk)
		}
	}
	if got := testutil.ToFloat64(f.junk); got != 3 {
		t.Fatalf("junk metric %v, want 3", got)
	}
	_ = os.Remove(filepath.Join(dir, "w2.json"))
	_ = os.Remove(filepath.Join(dir, "notes.txt"))
	_ = os.WriteFile(filepath.Join(dir, "w4.json"), good, 0o644) // still the wrong id for its name
	if _, err := f.scan(st); err != nil {
		t.Fatal(err)
	}
	if !board.IsActive(DiagRecordInvalid, subject) {
		t.Error("w4.json still names w1 and should stay invalid")
	}
	_ = os.Remove(filepath.Join(dir, "w4.json"))
	if _, err := f.scan(st); err != nil {
		t.Fatal(err)
	}
	if board.IsActive(DiagRecordInvalid, subject) || board.IsActive(DiagJunk, subject) || testutil.ToFloat64(f.junk) != 0 {
		t.Errorf("diagnostics after cleaning up: %+v", board.Active())
	}
}

// TestFileKeepaliveRewritesVanishedRecord: an operator who empties the
// directory loses nothing for long; the owner writes its record back.
func TestFileKeepaliveRewritesVanishedRecord(t *testing.T) {
	dir := t.TempDir()
	f, err := NewFile(FileConfig{Dir: dir, PollInterval: 10 * time.Millisecond,
		Common: Common{TTL: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, err := f.Register(context.Background(), testRecord("w1"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "w1.json")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		if _, err := os.Stat(p); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("record not rewritten")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := l.Revoke(context.Background()); err != nil {
		t.Fatal(err)
	}
	if recs, _ := f.scan(newScanState()); len(recs) != 0 {
		t.Fatalf("record still live after Revoke: %v", recs)
	}
}

// TestFileDirectoryUnreadable: discovery_unavailable while the directory
// cannot be read, the last known set kept, recovery once it is back.
func TestFileDirectoryUnreadable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "disc")
	board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
	f, err := NewFile(FileConfig{Dir: dir, PollInterval: 10 * time.Millisecond,
		Common: Common{Board: board, Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The record is written by hand: a registered worker would recreate
	// the directory.
	b, _ := json.Marshal(fileEntry{Record: testRecord("w1"), PID: os.Getpid(), Instance: "x"})
	if err := os.WriteFile(filepath.Join(dir, "w1.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, f)
	w.waitFor(5*time.Second, "w1", func() bool { return len(w.live) == 1 })
	moved := dir + ".moved"
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	subject := "file:" + dir
	deadline := time.Now().Add(5 * time.Second)
	for !board.IsActive(DiagUnavailable, subject) {
		if time.Now().After(deadline) {
			t.Fatal("discovery_unavailable not raised")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := w.liveIDs(); len(got) != 1 {
		t.Fatalf("live %v during the outage, want the last known [w1]", got)
	}
	if err := os.Rename(moved, dir); err != nil {
		t.Fatal(err)
	}
	for board.IsActive(DiagUnavailable, subject) {
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatal("discovery_unavailable not cleared")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
