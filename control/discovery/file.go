package discovery

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/health"
)

// FileConfig configures the file backend.
type FileConfig struct {
	Common
	// Dir holds one <id>.json per worker (--discovery-dir). Created 0700
	// if missing (and again if it is removed); a directory owned by
	// another user, or writable by others, is refused: anyone who can
	// write it can route this deployment's traffic.
	Dir string
	// PollInterval is how often watchers re-read Dir, and how often a
	// worker checks that its record is intact (default 250 ms).
	PollInterval time.Duration
}

// File is the file backend: a directory of JSON records, one per worker,
// each refreshed (its modification time) every TTL/3 by its owner and
// checked every PollInterval: a record that vanished, was corrupted or
// replaced is written again.
//
// A record is live while its file is younger than its TTL and, when its
// owner runs on this host, while the owner's process exists; so a worker
// killed with SIGKILL disappears within one poll, not one TTL. Clocks of
// hosts sharing the directory must agree to well within the TTL.
//
// Watchers read only regular files of at most MaxRecordBytes, owned by
// this user, opened without following symlinks and without blocking
// (FIFOs). Everything else in the directory is junk: counted in one
// metric (tandem_discovery_junk_files) and one diagnostic, never read.
type File struct {
	cfg  FileConfig
	host string
	uid  int

	junk prometheus.Gauge

	mu     sync.Mutex
	leases map[*fileLease]struct{}
	closed bool
}

// fileEntry is the content of one record file.
type fileEntry struct {
	Record Record `json:"record"`
	Host   string `json:"host"`
	PID    int    `json:"pid"`
	// Instance tells this registration from a later one under the same id,
	// so a revoking worker never deletes its successor's file.
	Instance string `json:"instance"`
	TTLMs    int64  `json:"ttl_ms"`
	// Revoked marks a tombstone: the worker deregistered. Watchers drop it
	// at once, where a record that merely vanished while its owner still
	// runs is kept for a grace period (its owner writes it back).
	Revoked bool `json:"revoked,omitempty"`
}

// MaxRecordBytes bounds one record file; a record is well under 2 KiB.
const MaxRecordBytes = 64 << 10

// maxDirEntries bounds the entries one scan looks at; a flood past it is
// counted, not read.
const maxDirEntries = 10_000

// Diagnostic codes of the file backend.
const (
	// DiagJunk: files in the discovery directory that are not readable
	// records (wrong type, too large, foreign owner, corrupt); one
	// diagnostic for the directory, whatever their number.
	DiagJunk = "discovery_junk_files"
	// DiagRecordRewritten is logged when a worker finds its record
	// missing, corrupt or replaced and writes it again.
	DiagRecordRewritten = "discovery_record_rewritten"
)

// NewFile returns the file backend for cfg.Dir.
func NewFile(cfg FileConfig) (*File, error) {
	cfg.Common = cfg.Common.withDefaults("discovery.file")
	if cfg.Dir == "" {
		return nil, errors.New("discovery: file backend needs a directory (--discovery-dir)")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 250 * time.Millisecond
	}
	f := &File{cfg: cfg, uid: os.Geteuid(), leases: map[*fileLease]struct{}{},
		junk: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_discovery_junk_files", Help: "Files in the discovery directory that are not readable worker records (ignored).",
		})}
	if err := f.ensureDir(); err != nil {
		return nil, err
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("discovery: hostname: %w", err)
	}
	f.host = host
	return f, nil
}

// Collector returns the backend's metrics, for the process's registry.
func (f *File) Collector() prometheus.Collector { return f.junk }

// ensureDir creates the directory 0700 if missing and refuses one that a
// stranger could write: owned by another user, or writable by group or
// others.
func (f *File) ensureDir() error {
	dir := f.cfg.Dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("discovery: %s is not a directory", dir)
	}
	if uid, ok := ownerUID(info); ok && uid != f.uid {
		return fmt.Errorf("discovery: %s is owned by uid %d, not this user (uid %d): anyone who can write it can route this deployment's requests; use a private directory", dir, uid, f.uid)
	}
	if info.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("discovery: %s is writable by other users (mode %v): anyone who can write it can route this deployment's requests; chmod 700 it or use a private directory", dir, info.Mode().Perm())
	}
	return nil
}

func (f *File) path(id string) string { return filepath.Join(f.cfg.Dir, id+".json") }

// Register implements Registry.
func (f *File) Register(ctx context.Context, rec Record) (Lease, error) {
	if err := rec.Validate(); err != nil {
		return nil, err
	}
	var inst [8]byte
	_, _ = rand.Read(inst[:])
	e := fileEntry{Record: rec, Host: f.host, PID: os.Getpid(), Instance: hex.EncodeToString(inst[:]), TTLMs: f.cfg.TTL.Milliseconds()}
	data, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("discovery: encode %s: %w", rec.ID, err)
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, ErrClosed
	}
	f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := f.write(rec.ID, data); err != nil {
		return nil, fmt.Errorf("discovery: register %s: %w", rec.ID, err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	l := &fileLease{f: f, id: rec.ID, entry: e, data: data, cancel: cancel, done: make(chan struct{}), touched: time.Now()}
	f.mu.Lock()
	f.leases[l] = struct{}{}
	f.mu.Unlock()
	go l.keepalive(lctx)
	return l, nil
}

// write replaces id's record with data, recreating the directory if it
// was removed.
func (f *File) write(id string, data []byte) error {
	err := writeAtomic(f.path(id), data)
	if errors.Is(err, fs.ErrNotExist) {
		if err = f.ensureDir(); err == nil {
			err = writeAtomic(f.path(id), data)
		}
	}
	return err
}

// writeAtomic replaces path with data in one rename, so a watcher never
// reads half a record. A rename replaces a symlink or FIFO planted under
// the name, never what it points to.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

// readRecord reads one record file safely: no symlink followed, no FIFO
// waited on, only a regular file of at most MaxRecordBytes owned by uid.
func readRecord(path string, uid int) ([]byte, fs.FileInfo, error) {
	fd, err := os.OpenFile(path, openFlags, 0)
	if err != nil {
		return nil, nil, err
	}
	defer fd.Close()
	info, err := fd.Stat()
	if err != nil {
		return nil, nil, err
	}
	if err := checkRecordFile(info, uid); err != nil {
		return nil, info, err
	}
	b, err := io.ReadAll(io.LimitReader(fd, MaxRecordBytes+1))
	if err != nil {
		return nil, info, err
	}
	if len(b) > MaxRecordBytes {
		return nil, info, fmt.Errorf("larger than %d bytes", MaxRecordBytes)
	}
	return b, info, nil
}

// errNotRecordFile wraps the reasons a directory entry is not read.
var errNotRecordFile = errors.New("not a record file")

func checkRecordFile(info fs.FileInfo, uid int) error {
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%w: %v is not a regular file", errNotRecordFile, info.Mode().Type())
	}
	if info.Size() > MaxRecordBytes {
		return fmt.Errorf("%w: %d bytes, more than %d", errNotRecordFile, info.Size(), MaxRecordBytes)
	}
	if owner, ok := ownerUID(info); ok && owner != uid {
		return fmt.Errorf("%w: owned by uid %d, not this user", errNotRecordFile, owner)
	}
	return nil
}

type fileLease struct {
	f       *File
	id      string
	entry   fileEntry
	data    []byte
	cancel  context.CancelFunc
	done    chan struct{}
	once    sync.Once
	touched time.Time // last refresh of the file's mtime
}

// keepalive checks the record every PollInterval and touches it every
// TTL/3. A record that vanished, was truncated, corrupted or replaced (a
// stranger's, another instance's) is written again: only the live owner
// of an id decides what its record says.
func (l *fileLease) keepalive(ctx context.Context) {
	defer close(l.done)
	board, subject := l.f.cfg.Board, "file:"+l.id
	tick := time.NewTicker(min(l.f.cfg.PollInterval, l.f.cfg.TTL/3))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rival, err := l.refresh()
		if rival != "" {
			board.Raise(DiagIDConflict, l.id, health.Error,
				"another live process ("+rival+") registered the same worker id; this worker writes its record back, so the two take turns: give each worker its own --id", "dir", l.f.cfg.Dir)
		} else {
			board.Clear(DiagIDConflict, l.id, "", "")
		}
		if err != nil {
			board.Raise(DiagUnavailable, subject, health.Error, "cannot refresh the worker's discovery record: "+err.Error(), "dir", l.f.cfg.Dir)
		} else {
			board.Clear(DiagUnavailable, subject, DiagRecovered, "discovery record refreshed again")
		}
	}
}

// refresh makes the file hold this lease's record. rival names another
// live process whose record it replaced.
func (l *fileLease) refresh() (rival string, err error) {
	p := l.f.path(l.id)
	b, info, err := readRecord(p, l.f.uid)
	if err == nil && bytes.Equal(b, l.data) {
		if time.Since(l.touched) < l.f.cfg.TTL/3 {
			return "", nil
		}
		now := time.Now()
		if err := os.Chtimes(p, now, now); err != nil {
			return "", err
		}
		l.touched = now
		return "", nil
	}
	why := "missing"
	switch {
	case err == nil:
		why = "replaced"
		var e fileEntry
		if json.Unmarshal(b, &e) != nil {
			why = "corrupt"
		} else if e.Instance != l.entry.Instance && l.f.holds(e.Instance) {
			// A later registration of the same id through this registry
			// (a re-registration in the same process) owns the file now:
			// the two leases must not take turns overwriting it.
			return "", nil
		} else if e.Instance != l.entry.Instance && l.f.liveOwner(e, info) {
			rival = fmt.Sprintf("host %s pid %d", e.Host, e.PID)
		}
	case !errors.Is(err, fs.ErrNotExist):
		why = err.Error()
	}
	l.f.cfg.Logger.Warn("discovery record "+why+"; writing it again", "diagnostic_code", DiagRecordRewritten, "worker", l.id, "dir", l.f.cfg.Dir)
	if err := l.f.write(l.id, l.data); err != nil {
		return rival, err
	}
	l.touched = time.Now()
	return rival, nil
}

// holds reports whether one of this registry's live leases wrote the
// registration instance.
func (f *File) holds(instance string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for l := range f.leases {
		if l.entry.Instance == instance {
			return true
		}
	}
	return false
}

// liveOwner reports whether e's owner is a process that still runs (as
// far as this host can tell) and still refreshes its record.
func (f *File) liveOwner(e fileEntry, info fs.FileInfo) bool {
	if e.Host == f.host {
		return e.PID > 0 && e.PID != os.Getpid() && !processGone(e.PID)
	}
	return info != nil && time.Since(info.ModTime()) < f.cfg.TTL
}

// Revoke implements Lease: the record becomes a tombstone, which watchers
// drop at once (a record that merely vanishes is given a grace period,
// since its owner writes it back).
func (l *fileLease) Revoke(context.Context) error {
	var err error
	l.once.Do(func() {
		l.cancel()
		<-l.done
		l.f.mu.Lock()
		delete(l.f.leases, l)
		l.f.mu.Unlock()
		p := l.f.path(l.id)
		b, _, rerr := readRecord(p, l.f.uid)
		if errors.Is(rerr, fs.ErrNotExist) {
			return
		}
		if rerr == nil {
			var e fileEntry
			if json.Unmarshal(b, &e) == nil && e.Instance != l.entry.Instance {
				return // a successor's record
			}
		}
		tomb := l.entry
		tomb.Revoked = true
		data, _ := json.Marshal(tomb) // plain fields: cannot fail
		if werr := writeAtomic(p, data); werr != nil {
			err = fmt.Errorf("discovery: revoke %s: %w", l.id, werr)
		}
	})
	return err
}

// missingGrace is how long a watcher keeps a record that vanished or was
// spoiled while its owner process still runs on this host: the owner
// checks its record every PollInterval and writes it back, so deleting or
// corrupting files costs no requests.
func (f *File) missingGrace() time.Duration { return max(8*f.cfg.PollInterval, time.Second) }

// scanState is a watcher's memory between scans.
type scanState struct {
	// live: the entries live at the last scan, by id; lost: when a live
	// id's file first went missing or bad while its owner ran.
	live map[string]fileEntry
	lost map[string]time.Time
	// junk: files already judged unreadable, by name, with the stamp
	// (size, mtime) they had: an unchanged junk file is not read again.
	junk map[string]junkFile
}

type junkFile struct {
	size   int64
	mod    time.Time
	reason string
}

func newScanState() *scanState {
	return &scanState{live: map[string]fileEntry{}, lost: map[string]time.Time{}, junk: map[string]junkFile{}}
}

// Watch implements Registry by polling the directory.
func (f *File) Watch(ctx context.Context, fn func(Event)) error {
	v := newView(fn)
	st := newScanState()
	tick := time.NewTicker(f.cfg.PollInterval)
	defer tick.Stop()
	for {
		recs, err := f.scan(st)
		if err != nil {
			f.cfg.Board.Raise(DiagUnavailable, "file:"+f.cfg.Dir, health.Error,
				"cannot read the discovery directory; keeping the last known workers: "+err.Error())
		} else {
			f.cfg.Board.Clear(DiagUnavailable, "file:"+f.cfg.Dir, DiagRecovered, "discovery directory readable again")
			v.replace(recs)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// scan reads every record file and keeps the live ones.
func (f *File) scan(st *scanState) (map[string]Record, error) {
	d, err := os.Open(f.cfg.Dir)
	if err != nil {
		return nil, err
	}
	ents, err := d.ReadDir(maxDirEntries)
	extra := 0
	if err == nil && len(ents) == maxDirEntries {
		// A flood: count the rest by name only, a batch at a time.
		for {
			names, err := d.Readdirnames(4096)
			extra += len(names)
			if err != nil || len(names) == 0 {
				break
			}
		}
	}
	d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	now := time.Now()
	out := map[string]Record{}
	entries := map[string]fileEntry{}
	junk := map[string]junkFile{}
	spoiled := map[string]bool{} // ids whose file exists but is unreadable
	revoked := map[string]bool{} // ids whose owner deregistered
	for _, de := range ents {
		name := de.Name()
		if strings.HasPrefix(name, ".") {
			continue // atomic writes' temporary files
		}
		id, isJSON := strings.CutSuffix(name, ".json")
		if !isJSON || !de.Type().IsRegular() {
			reason := "not a <id>.json record"
			if isJSON {
				reason = fmt.Sprintf("%v is not a regular file", de.Type())
				spoiled[id] = true
			}
			junk[name] = junkFile{reason: reason}
			continue
		}
		info, err := de.Info()
		if err != nil {
			continue // removed since ReadDir
		}
		if j, ok := st.junk[name]; ok && j.size == info.Size() && j.mod.Equal(info.ModTime()) {
			junk[name], spoiled[id] = j, true
			continue
		}
		e, err := f.readEntry(filepath.Join(f.cfg.Dir, name), id)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			junk[name], spoiled[id] = junkFile{size: info.Size(), mod: info.ModTime(), reason: err.Error()}, true
			continue
		}
		ttl := time.Duration(e.TTLMs) * time.Millisecond
		if ttl <= 0 {
			ttl = f.cfg.TTL
		}
		switch {
		case e.Revoked:
			revoked[id] = true
			if now.Sub(info.ModTime()) > ttl {
				// Watchers have seen the tombstone by now; it would only
				// accumulate (worker ids often include a pid).
				_ = os.Remove(filepath.Join(f.cfg.Dir, name))
			}
			continue
		case now.Sub(info.ModTime()) > ttl:
			continue // its owner stopped refreshing it
		case e.Host == f.host && e.PID > 0 && processGone(e.PID):
			continue
		}
		entries[id] = e
	}
	// A live worker whose record vanished, went bad or was replaced by an
	// entry whose owner is not running keeps its place while its own
	// process runs: it writes the record back within a poll.
	for id, prev := range st.live {
		cur, ok := entries[id]
		if ok && (cur.Instance == prev.Instance || f.entryOwnerRuns(cur)) {
			delete(st.lost, id)
			continue
		}
		if revoked[id] || !f.entryOwnerRuns(prev) {
			delete(st.lost, id)
			continue
		}
		since, seen := st.lost[id]
		if !seen {
			since = now
			st.lost[id] = now
			how := "vanished"
			if spoiled[id] {
				how = "is unreadable"
			} else if ok {
				how = "was replaced by an entry whose owner does not run"
			}
			f.cfg.Logger.Warn("a live worker's discovery record "+how+"; keeping the worker while its owner rewrites it",
				"worker", id, "grace", f.missingGrace())
		}
		if now.Sub(since) < f.missingGrace() {
			entries[id] = prev
		} else {
			delete(st.lost, id)
		}
	}
	for id := range st.lost {
		if _, ok := st.live[id]; !ok {
			delete(st.lost, id)
		}
	}
	st.live = entries
	for id, e := range entries {
		out[id] = e.Record
	}
	st.junk = junk
	f.reportJunk(junk, extra)
	return out, nil
}

// entryOwnerRuns reports whether e's owner can be seen running (same host,
// process alive); for other hosts it cannot be told, and the TTL decides.
func (f *File) entryOwnerRuns(e fileEntry) bool {
	return e.Host == f.host && e.PID > 0 && !processGone(e.PID)
}

// readEntry reads and validates the record at path, which must name id.
func (f *File) readEntry(path, id string) (fileEntry, error) {
	var e fileEntry
	b, _, err := readRecord(path, f.uid)
	if err != nil {
		return e, err
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("not a record: %w", err)
	}
	if e.Revoked {
		return e, nil
	}
	if err := e.Record.Validate(); err != nil {
		return e, err
	}
	if e.Record.ID != id {
		return e, fmt.Errorf("record id %q does not match the file name", e.Record.ID)
	}
	return e, nil
}

// reportJunk sets the junk metric and the directory's one diagnostic.
func (f *File) reportJunk(junk map[string]junkFile, extra int) {
	n := len(junk) + extra
	f.junk.Set(float64(n))
	subject := "file:" + f.cfg.Dir
	if n == 0 {
		f.cfg.Board.Clear(DiagJunk, subject, "", "")
		f.cfg.Board.Clear(DiagRecordInvalid, subject, "", "")
		return
	}
	names := make([]string, 0, len(junk))
	for name := range junk {
		names = append(names, name)
	}
	slices.Sort(names)
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d files in the discovery directory are not readable worker records and are ignored", n)
	for i, name := range names {
		if i == 3 {
			fmt.Fprintf(&sb, "; and %d more", n-3)
			break
		}
		if len(name) > 64 {
			name = name[:64] + "…"
		}
		fmt.Fprintf(&sb, "; %s: %.120s", name, junk[name].reason)
	}
	f.cfg.Board.Raise(DiagJunk, subject, health.Warn, sb.String())
	// A .json file that fails as a record is also reported under the
	// record code operators already watch, once for the directory.
	bad := 0
	for name := range junk {
		if strings.HasSuffix(name, ".json") {
			bad++
		}
	}
	if bad > 0 {
		f.cfg.Board.Raise(DiagRecordInvalid, subject, health.Warn, fmt.Sprintf("%d record files cannot be read; those workers are ignored (see %s)", bad, DiagJunk))
	} else {
		f.cfg.Board.Clear(DiagRecordInvalid, subject, "", "")
	}
}

// Close implements Registry: its leases are revoked.
func (f *File) Close() error {
	f.mu.Lock()
	f.closed = true
	ls := make([]*fileLease, 0, len(f.leases))
	for l := range f.leases {
		ls = append(ls, l)
	}
	f.mu.Unlock()
	var errs []error
	for _, l := range ls {
		errs = append(errs, l.Revoke(context.Background()))
	}
	return errors.Join(errs...)
}
