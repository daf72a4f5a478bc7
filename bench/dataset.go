package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// DatasetItem is one line of a dataset: a completion prompt or a chat.
type DatasetItem struct {
	Prompt    string    `json:"prompt,omitempty"`
	Messages  []Message `json:"messages,omitempty"`
	MaxTokens int       `json:"max_tokens,omitempty"`
}

// Limits on a dataset: a line is one request, and a request over 16 MiB
// is not a prompt.
const (
	maxDatasetLine  = 16 << 20
	maxDatasetItems = 10_000_000
	maxDatasetOut   = 1 << 20
)

// LoadDataset reads a JSONL dataset: each line {"prompt": "..."} or
// {"messages": [{"role": "user", "content": "..."}]}, optionally with
// "max_tokens". Blank lines are skipped; anything else is an error naming
// the line.
func LoadDataset(r io.Reader) ([]DatasetItem, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxDatasetLine)
	var out []DatasetItem
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var it DatasetItem
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&it); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		switch {
		case it.Prompt != "" && len(it.Messages) > 0:
			return nil, fmt.Errorf("line %d: give prompt or messages, not both", line)
		case it.Prompt == "" && len(it.Messages) == 0:
			return nil, fmt.Errorf("line %d: neither prompt nor messages", line)
		case it.MaxTokens < 0 || it.MaxTokens > maxDatasetOut:
			return nil, fmt.Errorf("line %d: max_tokens %d outside [0, %d]", line, it.MaxTokens, maxDatasetOut)
		}
		for k, m := range it.Messages {
			if m.Role == "" {
				return nil, fmt.Errorf("line %d: message %d has no role", line, k)
			}
		}
		if len(out) >= maxDatasetItems {
			return nil, fmt.Errorf("more than %d lines", maxDatasetItems)
		}
		out = append(out, it)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	if len(out) == 0 {
		return nil, errors.New("the dataset is empty")
	}
	return out, nil
}

// Dataset sends a dataset's lines in order, from the top again when the
// run asks for more requests than it has.
type Dataset struct {
	Items            []DatasetItem
	DefaultMaxTokens int
	IgnoreEOS        bool
}

// Name implements Workload.
func (*Dataset) Name() string { return "dataset" }

// Sessions implements Workload: unbounded, so --requests may exceed the
// file and warm-up may draw from it.
func (*Dataset) Sessions() int { return 0 }

// Validate checks the configuration.
func (d *Dataset) Validate() error {
	if len(d.Items) == 0 {
		return errors.New("the dataset is empty")
	}
	if d.DefaultMaxTokens < 1 {
		return fmt.Errorf("default max_tokens %d must be at least 1", d.DefaultMaxTokens)
	}
	return nil
}

// NewSession implements Workload.
func (d *Dataset) NewSession(i, _ int) Session {
	it := d.Items[i%len(d.Items)]
	out := it.MaxTokens
	if out == 0 {
		out = d.DefaultMaxTokens
	}
	req := &Request{MaxTokens: out, IgnoreEOS: d.IgnoreEOS, Tag: noTag(i)}
	// Intended lengths are unknown before the server's usage; words are
	// the estimate for a server that reports none.
	if it.Prompt != "" {
		req.Endpoint, req.Prompt, req.InputTokens = Completions, it.Prompt, len(strings.Fields(it.Prompt))
	} else {
		req.Endpoint, req.Messages = Chat, it.Messages
		for _, m := range it.Messages {
			req.InputTokens += len(strings.Fields(m.Content))
		}
	}
	return &oneShot{req: req}
}
