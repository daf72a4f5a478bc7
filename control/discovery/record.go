package discovery

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Role is what a worker does in a (possibly disaggregated) deployment.
type Role string

const (
	// RoleAggregated workers prefill and decode their own requests.
	RoleAggregated Role = "aggregated"
	// RolePrefill workers compute prompts' KV for decode workers.
	RolePrefill Role = "prefill"
	// RoleDecode workers decode, taking prompt KV from prefill workers.
	RoleDecode Role = "decode"
)

// ParseRole parses the --role flag ("" is aggregated).
func ParseRole(s string) (Role, error) {
	switch Role(s) {
	case "", RoleAggregated:
		return RoleAggregated, nil
	case RolePrefill, RoleDecode:
		return Role(s), nil
	}
	return "", fmt.Errorf("discovery: unknown role %q (want aggregated, prefill or decode)", s)
}

// KVEvents says where a worker's KV cache events can be followed.
type KVEvents struct {
	// Endpoint is the worker's ZMQ PUB socket ("" when it publishes none).
	Endpoint string `json:"endpoint,omitempty"`
	// ReplayEndpoint is its ZMQ ROUTER replay socket ("" if none).
	ReplayEndpoint string `json:"replay_endpoint,omitempty"`
	// ReplayToken is what a replay request must carry to be answered with
	// past batches (which carry prompts when events have token ids):
	// routers read it here, where only cluster members read.
	// Hex-encoded (a record stays comparable).
	ReplayToken string `json:"replay_token,omitempty"`
	// Format is the encoding of events inside a batch: "map" or "array".
	Format string `json:"format,omitempty"`
	// Topic is the ZMQ topic the worker publishes under.
	Topic string `json:"topic,omitempty"`
	// Subject is the NATS subject the worker relays its batches to (""
	// when it relays none): the model's subject, shared by its workers.
	Subject string `json:"subject,omitempty"`
}

// KVTransfer says how a worker takes part in disaggregated prefill.
type KVTransfer struct {
	// Addr is where the worker's transfer node receives KV blocks (a
	// decode worker's; "" when it receives none).
	Addr string `json:"addr,omitempty"`
	// BlockBytes is the size of one block's payload, which prices a
	// transfer before it starts.
	BlockBytes int `json:"block_bytes,omitempty"`
	// Protocol is how the worker's KV moves: "" (Tandem's transfer plane,
	// driven by the disagg orchestrator) or ProtocolVLLM (vLLM's own P/D
	// protocol: the frontend runs a prefill leg and passes the
	// kv_transfer_params it returns to the decode leg; the servers move
	// the KV themselves).
	Protocol string `json:"protocol,omitempty"`
}

// ProtocolVLLM is KVTransfer.Protocol for vLLM servers (NixlConnector).
const ProtocolVLLM = "vllm"

// KVLayout describes the bytes of a worker's KV cache. Two workers may hand
// KV to each other only if their layouts are equal, which Fingerprint
// condenses into one comparable string. Fields an engine cannot know (the
// mocker simulates no layers) are zero and still compared.
type KVLayout struct {
	Model     string `json:"model"`
	DType     string `json:"dtype,omitempty"`
	BlockSize int    `json:"block_size"`
	Layers    int    `json:"layers,omitempty"`
	KVHeads   int    `json:"kv_heads,omitempty"`
	HeadSize  int    `json:"head_size,omitempty"`
	// TokenizerHash is the worker tokenizer's Fingerprint: token ids mean
	// the same thing on both sides only if it matches.
	TokenizerHash string `json:"tokenizer_hash,omitempty"`
	// Weights identifies the checkpoint where the engine can tell (the
	// native engine's weight fingerprint); KV from other weights is garbage
	// even when every shape matches.
	Weights string `json:"weights,omitempty"`
	// EngineLayout is the engine's own layout string (engine.KVPort's
	// KVLayout), the one its KV transfers are checked against, so a
	// record never pairs what the transfer plane would refuse.
	EngineLayout string `json:"engine_layout,omitempty"`
	// Config is the deployment's KV configuration fingerprint (the
	// TandemDeployment operator passes it to every pod with
	// --kv-config-fingerprint): workers started from two generations of
	// one object (a block size or dtype change mid-rollout) differ here
	// even where the engine cannot tell, and are never paired.
	Config string `json:"config,omitempty"`
}

// Fingerprint is a short stable digest of every field, for logs and for a
// quick equality test across processes and versions.
func (l KVLayout) Fingerprint() string {
	h := sha256.New()
	// A fixed, versioned text form: JSON field order or omitempty changes
	// must never change a fingerprint.
	fmt.Fprintf(h, "kvlayout/1|%s|%s|%d|%d|%d|%d|%s|%s|%s",
		l.Model, l.DType, l.BlockSize, l.Layers, l.KVHeads, l.HeadSize, l.TokenizerHash, l.Weights, l.EngineLayout)
	if l.Config != "" {
		// Appended only when set, so layouts without it keep the
		// fingerprints they always had.
		fmt.Fprintf(h, "|config=%s", l.Config)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// Diff lists the fields in which l and o differ, as "field: a != b", for
// the kv_layout_mismatch diagnostic (a fingerprint alone tells an operator
// nothing).
func (l KVLayout) Diff(o KVLayout) []string {
	var out []string
	add := func(name string, a, b any) {
		if a != b {
			out = append(out, fmt.Sprintf("%s: %v != %v", name, a, b))
		}
	}
	add("model", l.Model, o.Model)
	add("dtype", l.DType, o.DType)
	add("block_size", l.BlockSize, o.BlockSize)
	add("layers", l.Layers, o.Layers)
	add("kv_heads", l.KVHeads, o.KVHeads)
	add("head_size", l.HeadSize, o.HeadSize)
	add("tokenizer_hash", l.TokenizerHash, o.TokenizerHash)
	add("weights", l.Weights, o.Weights)
	add("engine_layout", l.EngineLayout, o.EngineLayout)
	add("config", l.Config, o.Config)
	return out
}

// Record is a worker's registration: everything a frontend needs to route
// to it, follow its KV cache and check that it can pair with others.
type Record struct {
	ID    string `json:"id"`
	Model string `json:"model"`
	Role  Role   `json:"role"`
	// RequestPlane is the host:port of the worker's gRPC request plane.
	RequestPlane string   `json:"request_plane"`
	KVEvents     KVEvents `json:"kv_events"`
	// KVTransfer is set on prefill and decode workers.
	KVTransfer KVTransfer `json:"kv_transfer,omitzero"`
	// MetricsAddr is where the worker serves /metrics ("" if nowhere).
	MetricsAddr string   `json:"metrics_addr,omitempty"`
	KVLayout    KVLayout `json:"kv_layout"`
	// CapacityBlocks is the KV cache size in blocks of KVLayout.BlockSize.
	CapacityBlocks int `json:"capacity_blocks"`
	// ContextLength is the longest prompt plus output the engine takes.
	ContextLength int `json:"context_length,omitempty"`
	// Engine is the engine kind ("mocker", "native", ...).
	Engine string `json:"engine"`
	// Version is the worker's Tandem version.
	Version string `json:"version"`
	// KVShare names the lower KV tiers the worker shares with other
	// workers of its host; zero: none.
	KVShare KVShare `json:"kv_share,omitzero"`
}

// KVShare names a worker's shared KV tiers (a host-memory pool, a disk
// directory several workers read): workers whose records name the same
// tier are one share group, and a router counts a block one of them
// publishes in that tier (a KV event with its medium) as every member's,
// since each can onboard it. "" is a tier of the worker's own.
type KVShare struct {
	// Host is the shared host-memory pool's name (medium CPU).
	Host string `json:"host,omitempty"`
	// Disk is the shared disk tier's name (medium STORAGE or DISK), e.g.
	// the native engine's "native:HOST:DIR".
	Disk string `json:"disk,omitempty"`
}

// maxShareName bounds a shared tier's name in a record.
const maxShareName = 1024

// validShareName reports whether s may name a shared tier: at most
// maxShareName bytes of printable UTF-8.
func validShareName(s string) bool {
	if len(s) > maxShareName || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// idRE keeps ids usable as file names, etcd key segments, metric labels and
// Kubernetes annotation values alike.
var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ErrInvalidRecord wraps every validation failure.
var ErrInvalidRecord = errors.New("discovery: invalid record")

// ValidID reports whether id may name a worker.
func ValidID(id string) bool { return idRE.MatchString(id) }

// Validate checks what every consumer relies on.
func (r Record) Validate() error {
	switch {
	case !ValidID(r.ID):
		return fmt.Errorf("%w: id %q (want 1-128 of [A-Za-z0-9._-], not starting with . _ or -)", ErrInvalidRecord, r.ID)
	case r.Model == "":
		return fmt.Errorf("%w: %s: no model", ErrInvalidRecord, r.ID)
	case r.Role != RoleAggregated && r.Role != RolePrefill && r.Role != RoleDecode:
		return fmt.Errorf("%w: %s: role %q", ErrInvalidRecord, r.ID, r.Role)
	case r.RequestPlane == "" || !strings.Contains(r.RequestPlane, ":"):
		return fmt.Errorf("%w: %s: request plane address %q is not host:port", ErrInvalidRecord, r.ID, r.RequestPlane)
	case r.KVTransfer.Protocol != "" && r.KVTransfer.Protocol != ProtocolVLLM:
		return fmt.Errorf("%w: %s: KV transfer protocol %q", ErrInvalidRecord, r.ID, r.KVTransfer.Protocol)
	case r.KVTransfer.Addr != "" && !strings.Contains(r.KVTransfer.Addr, ":"):
		return fmt.Errorf("%w: %s: KV transfer address %q is not host:port", ErrInvalidRecord, r.ID, r.KVTransfer.Addr)
	case r.CapacityBlocks < 0 || r.KVLayout.BlockSize < 0 || r.ContextLength < 0 || r.KVTransfer.BlockBytes < 0:
		return fmt.Errorf("%w: %s: negative size", ErrInvalidRecord, r.ID)
	case !validShareName(r.KVShare.Host) || !validShareName(r.KVShare.Disk):
		return fmt.Errorf("%w: %s: shared KV tier name not printable or over %d bytes", ErrInvalidRecord, r.ID, maxShareName)
	}
	return nil
}

// Marshal encodes r as the JSON every backend stores.
func (r Record) Marshal() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("discovery: encode record %s: %w", r.ID, err)
	}
	return b, nil
}

// UnmarshalRecord decodes and validates a stored record. Unknown fields are
// ignored so that older frontends read newer workers' records.
func UnmarshalRecord(b []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrInvalidRecord, err)
	}
	if r.Role == "" {
		r.Role = RoleAggregated
	}
	return r, r.Validate()
}
