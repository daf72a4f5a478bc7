package discovery

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tandemllm/tandem/health"
)

// Diagnostic codes of a record a frontend refuses (Refuse).
const (
	DiagKVLayoutMismatch = "kv_layout_mismatch"
	DiagModelUnserved    = "worker_model_unserved"
	DiagTokenizer        = "tokenizer_mismatch"
)

// Refusal is why a frontend refuses a worker's record: the diagnostic it
// raises for the worker.
type Refusal struct {
	Code     string
	Severity health.Severity
	Msg      string
	Attrs    []any
}

// Raise raises r on board, its subject the worker id.
func (r *Refusal) Raise(board *health.Board, id string) {
	board.Raise(r.Code, id, r.Severity, r.Msg, r.Attrs...)
}

// Refuse checks rec against a frontend serving model with tokenizer
// fingerprint tok, and, for a prefill or decode worker, against the
// frontend's members of the other role (peers, any order): their KV
// layouts must be equal for blocks to move between them. nil: rec may
// join.
func Refuse(rec Record, model, tok string, peers []Record) *Refusal {
	if rec.Model != model {
		return &Refusal{Code: DiagModelUnserved, Severity: health.Warn, Msg: fmt.Sprintf("worker serves model %q, this frontend serves %q", rec.Model, model)}
	}
	if th := rec.KVLayout.TokenizerHash; th != "" && th != tok {
		msg := fmt.Sprintf("worker tokenizer %s differs from the frontend's %s: its token ids would mean other text", th, tok)
		return &Refusal{Code: DiagTokenizer, Severity: health.Error, Msg: msg, Attrs: []any{"worker_tokenizer", th, "frontend_tokenizer", tok}}
	}
	var other Role
	switch rec.Role {
	case RolePrefill:
		other = RoleDecode
	case RoleDecode:
		other = RolePrefill
	default:
		return nil
	}
	peers = slices.Clone(peers)
	slices.SortFunc(peers, func(a, b Record) int { return strings.Compare(a.ID, b.ID) })
	for _, p := range peers {
		if p.ID == rec.ID || p.Role != other || p.Model != rec.Model {
			continue
		}
		a, b := rec.KVLayout, p.KVLayout
		if a.Fingerprint() == b.Fingerprint() {
			continue
		}
		diff := strings.Join(a.Diff(b), "; ")
		msg := fmt.Sprintf("refusing %s worker %s: its KV layout %s differs from %s worker %s's %s (%s)",
			rec.Role, rec.ID, a.Fingerprint(), p.Role, p.ID, b.Fingerprint(), diff)
		return &Refusal{Code: DiagKVLayoutMismatch, Severity: health.Error, Msg: msg,
			Attrs: []any{"worker", rec.ID, "layout", a.Fingerprint(), "peer", p.ID, "peer_layout", b.Fingerprint(), "diff", diff}}
	}
	return nil
}

// Unpaired counts the decode workers among recs that have no prefill
// worker of their KV transfer protocol to pair with: they prefill their
// own prompts.
func Unpaired(recs []Record) int {
	decode, prefill := map[string]int{}, map[string]int{}
	for _, r := range recs {
		switch r.Role {
		case RoleDecode:
			decode[r.KVTransfer.Protocol]++
		case RolePrefill:
			prefill[r.KVTransfer.Protocol]++
		}
	}
	alone := 0
	for p, n := range decode {
		if prefill[p] == 0 {
			alone += n
		}
	}
	return alone
}
