package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// TraceEntry is one line of a Mooncake trace (FAST'25 format): an arrival
// in milliseconds from the start, prompt and completion lengths in tokens,
// and one hash id per 512-token prompt block; equal ids at equal positions
// are a shared prefix block.
type TraceEntry struct {
	Timestamp    float64 `json:"timestamp"`
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
}

// LoadMooncake reads a Mooncake JSONL trace.
func LoadMooncake(r io.Reader) ([]TraceEntry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var out []TraceEntry
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var e TraceEntry
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("trace line %d: %w", line, err)
		}
		if e.InputLength < 1 || e.OutputLength < 0 || e.Timestamp < 0 {
			return nil, fmt.Errorf("trace line %d: input_length %d, output_length %d, timestamp %v out of range",
				line, e.InputLength, e.OutputLength, e.Timestamp)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading trace: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("trace is empty")
	}
	return out, nil
}

// LoadMooncakeFile reads a Mooncake JSONL trace file.
func LoadMooncakeFile(path string) ([]TraceEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening trace: %w", err)
	}
	defer f.Close()
	es, err := LoadMooncake(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return es, nil
}

// TracePrompt is how a trace's blocks become prompt content.
type TracePrompt string

const (
	// TraceIDs sends completions prompts as token ids: each hash id maps
	// to a fixed run of BlockSize ids, so requests with equal hash ids
	// share exactly those blocks, token for token. Exact; needs a server
	// that accepts token-id prompts (vLLM, Tandem).
	TraceIDs TracePrompt = "ids"
	// TraceWords sends text: each hash id maps to BlockSize fixed words.
	// Words are single tokens in o200k-family vocabularies, so blocks are
	// exact there and approximate (block boundaries drift by a few
	// tokens) under other tokenizers.
	TraceWords TracePrompt = "words"
)

// Trace replays a Mooncake trace at its own arrival times (divided by the
// run's Speedup), or at --rate / --concurrency when given.
type Trace struct {
	Entries   []TraceEntry
	BlockSize int // tokens per hash id; Mooncake's is 512
	Prompt    TracePrompt
	Vocab     VocabRange
	// MaxInput truncates prompts to this many tokens, keeping the leading
	// blocks (0: no limit); traces reach 191k tokens.
	MaxInput int
	// MaxOutput caps max_tokens (0: the trace's value).
	MaxOutput int
	IgnoreEOS bool
	Seed      uint64

	// overlap[i] is entry i's generated overlap in tokens, set by Validate
	// (which every run calls before its first session).
	overlap []int
}

// Name implements Workload.
func (*Trace) Name() string { return "trace" }

// promptLen is entry e's prompt length after MaxInput.
func (t *Trace) promptLen(e TraceEntry) int {
	if t.MaxInput > 0 {
		return min(e.InputLength, t.MaxInput)
	}
	return e.InputLength
}

// computeOverlap walks the trace in order: an entry's leading blocks whose
// hash ids an earlier entry sent are tokens it repeats (the ids map to the
// same token runs), up to the length that earlier entry sent of the block
// (its last block may have been cut); the walk stops at the first block
// that is new or longer than sent before.
func (t *Trace) computeOverlap() {
	sent := map[int64]int{}
	t.overlap = make([]int, len(t.Entries))
	for i, e := range t.Entries {
		n := t.promptLen(e)
		ov, matching := 0, true
		for b, h := range e.HashIDs {
			blk := min(t.BlockSize, n-b*t.BlockSize)
			if blk <= 0 {
				break
			}
			if prev := sent[h]; matching && prev > 0 {
				ov += min(prev, blk)
				matching = prev >= blk
			} else {
				matching = false
			}
			sent[h] = max(sent[h], blk)
		}
		t.overlap[i] = ov
	}
}

// Sessions implements Workload.
func (t *Trace) Sessions() int { return len(t.Entries) }

// Arrival implements Scheduled.
func (t *Trace) Arrival(i int) time.Duration {
	return time.Duration(t.Entries[i].Timestamp * float64(time.Millisecond))
}

// Validate checks the configuration.
func (t *Trace) Validate() error {
	if len(t.Entries) == 0 {
		return fmt.Errorf("trace has no entries")
	}
	if t.BlockSize < 1 {
		return fmt.Errorf("trace block size %d must be positive", t.BlockSize)
	}
	if t.Prompt != TraceIDs && t.Prompt != TraceWords {
		return fmt.Errorf("unknown trace prompt kind %q (want ids or words)", t.Prompt)
	}
	t.computeOverlap()
	return nil
}

// NewSession implements Workload.
func (t *Trace) NewSession(i, _ int) Session {
	e := t.Entries[i]
	n := e.InputLength
	if t.MaxInput > 0 {
		n = min(n, t.MaxInput)
	}
	out := max(e.OutputLength, 1)
	if t.MaxOutput > 0 {
		out = min(out, t.MaxOutput)
	}
	req := &Request{Endpoint: Completions, MaxTokens: out, IgnoreEOS: t.IgnoreEOS, InputTokens: n, Tag: noTag(i)}
	if i < len(t.overlap) {
		req.OverlapTokens = t.overlap[i]
	}
	// block returns the generator of prompt block b: the hash id's own
	// stream, or, past the listed ids, one private to this request.
	block := func(b int) *rng {
		if b < len(e.HashIDs) {
			return newRNG(t.Seed, 9, uint64(e.HashIDs[b]))
		}
		return newRNG(t.Seed, 10, uint64(i), uint64(b))
	}
	if t.Prompt == TraceIDs {
		v := t.Vocab.orDefault()
		ids := make([]int32, 0, n)
		for b := 0; len(ids) < n; b++ {
			r := block(b)
			for k := 0; k < t.BlockSize && len(ids) < n; k++ {
				ids = append(ids, int32(v.Lo+r.intn(v.Hi-v.Lo)))
			}
		}
		req.PromptIDs = ids
		return &oneShot{req: req}
	}
	var sb strings.Builder
	sb.Grow(n * 7)
	for b, left := 0, n; left > 0; b++ {
		k := min(t.BlockSize, left)
		appendWords(&sb, block(b), k)
		left -= k
	}
	req.Prompt = sb.String()
	return &oneShot{req: req}
}
