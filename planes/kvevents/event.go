package kvevents

import (
	"fmt"

	"github.com/tandemllm/tandem/planes/kvevents/event"
)

// Format selects how events inside a batch are encoded. The batch itself is
// always a positional array, as in every vLLM and SGLang release.
type Format uint8

const (
	// FormatMap is current vLLM's tagged-map encoding (the default).
	FormatMap Format = iota
	// FormatArray is the legacy positional encoding (vLLM before #42892).
	FormatArray
)

// ParseFormat parses the --kv-events-format flag value ("map" or "array").
func ParseFormat(s string) (Format, error) {
	switch s {
	case "map", "":
		return FormatMap, nil
	case "array":
		return FormatArray, nil
	}
	return 0, fmt.Errorf("kvevents: unknown event format %q (want array or map)", s)
}

func (f Format) String() string {
	if f == FormatArray {
		return "array"
	}
	return "map"
}

// The event model lives in package event, free of any transport, so that the
// index and the router can use it without linking ZMQ; these names keep
// kvevents' API whole.
type (
	EventType    = event.EventType
	Hash         = event.Hash
	OptInt       = event.OptInt
	Event        = event.Event
	Batch        = event.Batch
	StreamState  = event.StreamState
	StreamStatus = event.StreamStatus
	Handler      = event.Handler
)

// Event types.
const (
	TypeUnknown          = event.TypeUnknown
	TypeBlockStored      = event.TypeBlockStored
	TypeBlockRemoved     = event.TypeBlockRemoved
	TypeAllBlocksCleared = event.TypeAllBlocksCleared
)

// Stream states.
const (
	StreamConnecting = event.StreamConnecting
	StreamSynced     = event.StreamSynced
	StreamLive       = event.StreamLive
	StreamLoss       = event.StreamLoss
	StreamReset      = event.StreamReset
)

// IntHash returns an integer-form Hash.
func IntHash(v uint64) Hash { return event.IntHash(v) }

// BytesHash returns a bytes-form Hash, deriving V like vLLM does.
func BytesHash(b []byte) Hash { return event.BytesHash(b) }

// Int returns a present OptInt.
func Int(v int64) OptInt { return event.Int(v) }
