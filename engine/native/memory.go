package native

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/native/model"
	"github.com/tandemllm/tandem/process"
)

// defaultKVFloor is the smallest default KV cache: a small model's one
// full context is far less, and a pool this size keeps prefixes cached
// for many sequences.
const defaultKVFloor = 256 << 20

// minKVContext is the shortest context the machine's memory may leave a
// worker when its KV cache is sized by default.
const minKVContext = 512

// kvPlan is the KV cache the engine allocates: blocks of the pool, the
// context they leave, and why (for the start-up log and /health).
type kvPlan struct {
	blocks  int
	ctxLen  int
	sizedBy string
}

// machineMemory is what the engine may still use: /proc/meminfo's
// MemAvailable, lowered by the cgroup's limit less its usage where one is
// set. ok is false where neither can be read (another OS).
type machineMemory struct {
	avail int64
	from  string
	ok    bool
}

// readMachineMemory reads the memory available to this process.
var readMachineMemory = func() machineMemory {
	var m machineMemory
	if b, err := readSmall("/proc/meminfo"); err == nil {
		if v, ok := meminfoAvailable(b); ok {
			m = machineMemory{avail: v, from: "MemAvailable", ok: true}
		}
	}
	for _, cg := range [][2]string{
		{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},                                 // cgroup v2
		{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}, // v1
	} {
		limit, lok := readInt(cg[0])
		used, uok := readInt(cg[1])
		if !lok || !uok || limit <= 0 || limit >= 1<<60 || used < 0 {
			continue
		}
		if left := max(limit-used, 0); !m.ok || left < m.avail {
			m = machineMemory{avail: left, from: "cgroup " + cg[0], ok: true}
		}
		break
	}
	return m
}

// readSmall reads at most 64 KiB of a /proc or /sys file.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 64<<10))
}

// readInt reads a file holding one integer ("max" is no limit: false).
func readInt(path string) (int64, bool) {
	b, err := readSmall(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// meminfoAvailable parses MemAvailable (kB) from /proc/meminfo.
func meminfoAvailable(b []byte) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemAvailable:" {
			v, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || v < 0 || v > 1<<50 {
				return 0, false
			}
			return v << 10, true
		}
	}
	return 0, false
}

// planKV sizes the KV cache of one of workers engines over c with context
// ctxLen (blockBytes per block of the pool). An explicit size (flag) is
// honoured, but never below one full context. By default the pool is one
// full context or defaultKVFloor, whichever is larger, provided the
// machine has room: half of what it has available, less the weights not
// yet resident (mapped ones, paged in by the first requests), split
// between the workers. Where that is less than one full context the
// context itself shrinks to what fits (down to minKVContext).
func planKV(explicit int64, ctxLen, blockSize int, blockBytes int64, workers int, unresident int64, mem machineMemory) kvPlan {
	full := (ctxLen+blockSize-1)/blockSize + 1
	if explicit > 0 {
		return kvPlan{blocks: max(int(explicit/blockBytes), full), ctxLen: ctxLen,
			sizedBy: "--kv-cache-bytes (at least one full context)"}
	}
	want := max(full, int(defaultKVFloor/blockBytes))
	if !mem.ok {
		return kvPlan{blocks: want, ctxLen: ctxLen, sizedBy: "default: one full context or 256 MiB (the machine's memory is unknown)"}
	}
	workers = max(workers, 1)
	share := (mem.avail - unresident) / 2 / int64(workers)
	why := fmt.Sprintf("%s %s, half of it less %s of weights not yet resident, split between %d workers: %s each",
		mem.from, process.FormatBytes(mem.avail), process.FormatBytes(unresident), workers, process.FormatBytes(max(share, 0)))
	fits := int(max(share, 0) / blockBytes)
	if fits >= want {
		return kvPlan{blocks: want, ctxLen: ctxLen, sizedBy: "default: one full context or 256 MiB, which fits (" + why + ")"}
	}
	if fits >= full {
		return kvPlan{blocks: fits, ctxLen: ctxLen, sizedBy: "default: what fits, at least one full context (" + why + ")"}
	}
	minBlocks := (min(minKVContext, ctxLen)+blockSize-1)/blockSize + 1
	blocks := max(fits, minBlocks)
	return kvPlan{blocks: blocks, ctxLen: min(ctxLen, (blocks-1)*blockSize),
		sizedBy: "default: what fits, the context shortened to it (" + why + ")"}
}

// users counts the engines of this process on each model: workers
// started on one loaded model share its weights.
var users = struct {
	sync.Mutex
	n map[*model.Model]int
}{n: map[*model.Model]int{}}

func addUser(m *model.Model, d int) {
	users.Lock()
	defer users.Unlock()
	if users.n[m] += d; users.n[m] <= 0 {
		delete(users.n, m)
	}
}

func userCount(m *model.Model) int {
	users.Lock()
	defer users.Unlock()
	return users.n[m]
}

// Memory implements engine.MemoryReporter: the weights (shared by every
// engine of this process on the same model, so counted once), what of
// them the file's mapping holds, and this engine's KV pool.
func (e *Engine) Memory() engine.Memory {
	return engine.Memory{
		WeightsBytes: e.m.WeightBytes(), WeightsSharedBy: max(userCount(e.m), 1), WeightsMappedBytes: e.m.MappedWeightBytes(),
		KVBytes: int64(e.kv.RawBlockBytes()) * int64(e.kv.NumBlocks), KVTokens: e.kv.NumBlocks * e.kv.BlockSize, KVSizedBy: e.kvSizedBy,
	}
}
