package native

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/zeebo/xxh3"

	"github.com/tandemllm/tandem/engine/native/model"
	"github.com/tandemllm/tandem/kvcache"
)

// Offloaded blocks are real copies of the pool's K/V in its own element type
// (fp16 by default): G2 keeps them in host memory, G3 in one file per block
// under a directory of its own, written by a background goroutine so the
// scheduler never waits on the disk. A file is a header (magic, version,
// block hash, payload length, XXH3-64 of the payload) and the payload; a
// file whose checksum, hash or length does not match is refused on read,
// and the block is recomputed.

const (
	tierMagic      = "TKV1"
	tierHeaderSize = 4 + 4 + 32 + 8 + 8
	// tierQueue bounds the disk writes waiting for the writer: past it an
	// offload to disk is refused (the block will be recomputed) rather than
	// blocking the scheduler or growing memory.
	tierQueue = 256
)

// ErrTierCorrupt is returned when a disk tier file does not hold the block
// it is named after.
var ErrTierCorrupt = errors.New("native: KV tier file is corrupt")

type tierJob struct {
	h    kvcache.BlockHash
	data []byte // nil: remove the file
}

// tierStore implements kvcache.PayloadStore for the native engine.
type tierStore struct {
	kv     *model.KVStore
	dir    string // "" without a disk tier
	shared bool   // dir is shared with other workers: only our own files are removed at close
	log    *slog.Logger

	host map[kvcache.BlockHash][]byte // G2; scheduler goroutine only

	mu      sync.Mutex
	pending map[kvcache.BlockHash][]byte   // G3 payloads queued or being written
	mine    map[kvcache.BlockHash]struct{} // files this worker wrote and has not removed
	jobs    chan tierJob
	done    chan struct{}

	writeErrs, readErrs atomic.Uint64
}

// newTierStore makes the store; dir, when set, is the parent of a fresh
// per-engine directory that Close removes, or with shared the directory
// itself, which the workers of a host share (each removes its own files).
func newTierStore(kv *model.KVStore, parent string, shared bool, log *slog.Logger) (*tierStore, error) {
	ts := &tierStore{kv: kv, log: log, host: map[kvcache.BlockHash][]byte{}, pending: map[kvcache.BlockHash][]byte{},
		mine: map[kvcache.BlockHash]struct{}{}, shared: shared}
	if parent != "" {
		if err := os.MkdirAll(parent, 0o700); err != nil {
			return nil, fmt.Errorf("native: KV disk tier: %w", err)
		}
		dir := parent
		if !shared {
			var err error
			if dir, err = os.MkdirTemp(parent, "tandem-kv-"); err != nil {
				return nil, fmt.Errorf("native: KV disk tier: %w", err)
			}
		}
		ts.dir = dir
		ts.jobs = make(chan tierJob, tierQueue)
		ts.done = make(chan struct{})
		go ts.writer()
	}
	return ts, nil
}

func (ts *tierStore) path(h kvcache.BlockHash) string {
	return filepath.Join(ts.dir, hex.EncodeToString(h[:])+".kv")
}

// Offload implements kvcache.PayloadStore.
func (ts *tierStore) Offload(t kvcache.Tier, h kvcache.BlockHash, b kvcache.BlockID) error {
	data := ts.kv.CopyBlockOut(make([]byte, 0, ts.kv.RawBlockBytes()), int(b))
	if t == kvcache.TierG2 {
		ts.host[h] = data
		return nil
	}
	return ts.queue(h, data)
}

// queue hands a disk write to the writer without waiting.
func (ts *tierStore) queue(h kvcache.BlockHash, data []byte) error {
	if ts.jobs == nil {
		return errors.New("native: no disk tier")
	}
	ts.mu.Lock()
	ts.pending[h] = data
	ts.mu.Unlock()
	select {
	case ts.jobs <- tierJob{h: h, data: data}:
		return nil
	default:
		ts.mu.Lock()
		delete(ts.pending, h)
		ts.mu.Unlock()
		ts.writeErrs.Add(1)
		return errors.New("native: KV disk tier write queue full")
	}
}

// Demote implements kvcache.PayloadStore.
func (ts *tierStore) Demote(h kvcache.BlockHash) bool {
	data, ok := ts.host[h]
	delete(ts.host, h)
	return ok && ts.queue(h, data) == nil
}

// Drop implements kvcache.PayloadStore.
func (ts *tierStore) Drop(t kvcache.Tier, h kvcache.BlockHash) {
	if t == kvcache.TierG2 {
		delete(ts.host, h)
		return
	}
	if ts.jobs == nil {
		return
	}
	select {
	case ts.jobs <- tierJob{h: h}:
	default:
		// The queue is full: remove it here (a queued write of the same
		// block, if any, finds the pending entry gone and skips it).
		ts.mu.Lock()
		delete(ts.pending, h)
		ts.mu.Unlock()
		_ = os.Remove(ts.path(h))
	}
}

// Has implements kvcache.SharedTier: another worker's file for h is in
// the shared directory.
func (ts *tierStore) Has(h kvcache.BlockHash) bool {
	_, err := os.Stat(ts.path(h))
	return err == nil
}

// load returns block h's payload from tier t.
func (ts *tierStore) load(t kvcache.Tier, h kvcache.BlockHash) ([]byte, error) {
	if t == kvcache.TierG2 {
		if d, ok := ts.host[h]; ok {
			return d, nil
		}
		return nil, errors.New("native: block not in host memory")
	}
	ts.mu.Lock()
	d, ok := ts.pending[h]
	ts.mu.Unlock()
	if ok {
		return d, nil
	}
	d, err := ts.read(h)
	if err != nil {
		ts.readErrs.Add(1)
		ts.log.Warn("KV disk tier read failed; recomputing the block", "diagnostic_code", DiagKVTierReadFailed, "err", err)
	}
	return d, err
}

// read reads and verifies block h's file.
func (ts *tierStore) read(h kvcache.BlockHash) ([]byte, error) {
	f, err := os.Open(ts.path(h))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	want := ts.kv.RawBlockBytes()
	buf := make([]byte, tierHeaderSize+want+1) // one more: a longer file is corrupt too
	n, _ := readFull(f, buf)
	if n != tierHeaderSize+want || string(buf[:4]) != tierMagic || binary.LittleEndian.Uint32(buf[4:]) != 1 ||
		[32]byte(buf[8:40]) != h || binary.LittleEndian.Uint64(buf[40:]) != uint64(want) {
		return nil, fmt.Errorf("%w: %s: header or length", ErrTierCorrupt, filepath.Base(ts.path(h)))
	}
	data := buf[tierHeaderSize:n]
	if xxh3.Hash(data) != binary.LittleEndian.Uint64(buf[48:]) {
		return nil, fmt.Errorf("%w: %s: checksum", ErrTierCorrupt, filepath.Base(ts.path(h)))
	}
	return data, nil
}

func readFull(f *os.File, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// writer writes and removes disk tier files in queue order.
func (ts *tierStore) writer() {
	defer close(ts.done)
	hdr := make([]byte, tierHeaderSize)
	for j := range ts.jobs {
		if j.data == nil {
			if err := os.Remove(ts.path(j.h)); err != nil && !errors.Is(err, os.ErrNotExist) {
				ts.log.Warn("KV disk tier remove failed", "diagnostic_code", DiagKVTierWriteFailed, "err", err)
			}
			ts.mu.Lock()
			delete(ts.mine, j.h)
			ts.mu.Unlock()
			continue
		}
		ts.mu.Lock()
		cur, live := ts.pending[j.h]
		ts.mu.Unlock()
		if !live || &cur[0] != &j.data[0] {
			continue // dropped, or superseded by a later write, meanwhile
		}
		copy(hdr, tierMagic)
		binary.LittleEndian.PutUint32(hdr[4:], 1)
		copy(hdr[8:40], j.h[:])
		binary.LittleEndian.PutUint64(hdr[40:], uint64(len(j.data)))
		binary.LittleEndian.PutUint64(hdr[48:], xxh3.Hash(j.data))
		tmp := fmt.Sprintf("%s.%p.tmp", ts.path(j.h), ts)
		err := os.WriteFile(tmp, append(hdr, j.data...), 0o600)
		if err == nil {
			err = os.Rename(tmp, ts.path(j.h))
		}
		if err != nil {
			ts.writeErrs.Add(1)
			ts.log.Warn("KV disk tier write failed; the block will be recomputed", "diagnostic_code", DiagKVTierWriteFailed, "err", err)
			_ = os.Remove(tmp)
		}
		ts.mu.Lock()
		if c, ok := ts.pending[j.h]; ok && &c[0] == &j.data[0] {
			delete(ts.pending, j.h)
		}
		if err == nil {
			ts.mine[j.h] = struct{}{}
		}
		ts.mu.Unlock()
	}
}

// close stops the writer and removes the engine's disk tier directory.
func (ts *tierStore) close() {
	if ts.jobs == nil {
		return
	}
	close(ts.jobs)
	<-ts.done
	ts.jobs = nil
	if ts.shared {
		for h := range ts.mine {
			if err := os.Remove(ts.path(h)); err != nil && !errors.Is(err, os.ErrNotExist) {
				ts.log.Warn("KV disk tier cleanup failed", "dir", ts.dir, "err", err)
			}
		}
		return
	}
	if err := os.RemoveAll(ts.dir); err != nil {
		ts.log.Warn("KV disk tier cleanup failed", "dir", ts.dir, "err", err)
	}
}
