package discovery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tandemllm/tandem/health"
)

// FileConfig configures the file backend.
type FileConfig struct {
	Common
	// Dir holds one <id>.json per worker (--discovery-dir). Created if
	// missing.
	Dir string
	// PollInterval is how often watchers re-read Dir (default 250 ms). It
	// bounds how late a departure is seen when the owner's process is gone
	// on this host; elsewhere the TTL does.
	PollInterval time.Duration
}

// File is the file backend: a directory of JSON records, one per worker,
// each refreshed (its modification time) every TTL/3 by its owner.
//
// A record is live while its file is younger than its TTL and, when its
// owner runs on this host, while the owner's process exists; so a worker
// killed with SIGKILL disappears within one poll, not one TTL. Clocks of
// hosts sharing the directory must agree to well within the TTL.
type File struct {
	cfg  FileConfig
	host string

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
}

// NewFile returns the file backend for cfg.Dir.
func NewFile(cfg FileConfig) (*File, error) {
	cfg.Common = cfg.Common.withDefaults("discovery.file")
	if cfg.Dir == "" {
		return nil, errors.New("discovery: file backend needs a directory (--discovery-dir)")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 250 * time.Millisecond
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("discovery: hostname: %w", err)
	}
	return &File{cfg: cfg, host: host, leases: map[*fileLease]struct{}{}}, nil
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
	if err := writeAtomic(f.path(rec.ID), data); err != nil {
		return nil, fmt.Errorf("discovery: register %s: %w", rec.ID, err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	l := &fileLease{f: f, id: rec.ID, instance: e.Instance, data: data, cancel: cancel, done: make(chan struct{})}
	f.mu.Lock()
	f.leases[l] = struct{}{}
	f.mu.Unlock()
	go l.keepalive(lctx)
	return l, nil
}

// writeAtomic replaces path with data in one rename, so a watcher never
// reads half a record.
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

type fileLease struct {
	f        *File
	id       string
	instance string
	data     []byte
	cancel   context.CancelFunc
	done     chan struct{}
	once     sync.Once
}

// keepalive touches the file every TTL/3. A file that vanished (an
// operator cleaned the directory) is written again; one taken over by
// another instance is left to it.
func (l *fileLease) keepalive(ctx context.Context) {
	defer close(l.done)
	board, subject := l.f.cfg.Board, "file:"+l.id
	tick := time.NewTicker(l.f.cfg.TTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := l.refresh()
		switch {
		case errors.Is(err, errTakenOver):
			board.Raise(DiagIDConflict, l.id, health.Error,
				"another process registered the same worker id; this one stopped refreshing its record", "dir", l.f.cfg.Dir)
			return
		case err != nil:
			board.Raise(DiagUnavailable, subject, health.Error, "cannot refresh the worker's discovery record: "+err.Error(), "dir", l.f.cfg.Dir)
		default:
			board.Clear(DiagUnavailable, subject, DiagRecovered, "discovery record refreshed again")
		}
	}
}

var errTakenOver = errors.New("record taken over by another instance")

func (l *fileLease) refresh() error {
	p := l.f.path(l.id)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return writeAtomic(p, l.data)
	}
	if err != nil {
		return err
	}
	var e fileEntry
	if json.Unmarshal(b, &e) == nil && e.Instance != l.instance {
		return errTakenOver
	}
	now := time.Now()
	return os.Chtimes(p, now, now)
}

// Revoke implements Lease.
func (l *fileLease) Revoke(context.Context) error {
	var err error
	l.once.Do(func() {
		l.cancel()
		<-l.done
		l.f.mu.Lock()
		delete(l.f.leases, l)
		l.f.mu.Unlock()
		p := l.f.path(l.id)
		b, rerr := os.ReadFile(p)
		if errors.Is(rerr, fs.ErrNotExist) {
			return
		}
		if rerr != nil {
			err = fmt.Errorf("discovery: revoke %s: %w", l.id, rerr)
			return
		}
		var e fileEntry
		if json.Unmarshal(b, &e) == nil && e.Instance != l.instance {
			return // a successor's record
		}
		if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = fmt.Errorf("discovery: revoke %s: %w", l.id, rerr)
		}
	})
	return err
}

// Watch implements Registry by polling the directory.
func (f *File) Watch(ctx context.Context, fn func(Event)) error {
	v := newView(fn)
	invalid := map[string]bool{}
	tick := time.NewTicker(f.cfg.PollInterval)
	defer tick.Stop()
	for {
		recs, err := f.scan(invalid)
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

// scan reads every record file and keeps the live ones. invalid remembers
// which files were reported as invalid, to clear them once fixed or gone.
func (f *File) scan(invalid map[string]bool) (map[string]Record, error) {
	ents, err := os.ReadDir(f.cfg.Dir)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := map[string]Record{}
	seen := map[string]bool{}
	for _, de := range ents {
		name := de.Name()
		if de.IsDir() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") {
			continue
		}
		seen[name] = true
		info, err := de.Info()
		if err != nil {
			continue // removed since ReadDir
		}
		b, err := os.ReadFile(filepath.Join(f.cfg.Dir, name))
		if err != nil {
			continue
		}
		var e fileEntry
		err = json.Unmarshal(b, &e)
		if err == nil {
			err = e.Record.Validate()
		}
		if err == nil && e.Record.ID+".json" != name {
			err = fmt.Errorf("record id %q does not match the file name", e.Record.ID)
		}
		if err != nil {
			invalid[name] = true
			f.cfg.Board.Raise(DiagRecordInvalid, "file:"+name, health.Warn, "ignoring an invalid discovery record: "+err.Error())
			continue
		}
		if invalid[name] {
			delete(invalid, name)
			f.cfg.Board.Clear(DiagRecordInvalid, "file:"+name, "", "")
		}
		ttl := time.Duration(e.TTLMs) * time.Millisecond
		if ttl <= 0 {
			ttl = f.cfg.TTL
		}
		if now.Sub(info.ModTime()) > ttl {
			continue // its owner stopped refreshing it
		}
		if e.Host == f.host && e.PID > 0 && processGone(e.PID) {
			continue
		}
		out[e.Record.ID] = e.Record
	}
	for name := range invalid {
		if !seen[name] {
			delete(invalid, name)
			f.cfg.Board.Clear(DiagRecordInvalid, "file:"+name, "", "")
		}
	}
	return out, nil
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
