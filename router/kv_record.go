package router

import (
	"encoding/hex"

	"github.com/tandemllm/tandem/control/discovery"
)

// FollowRecord has the policy follow worker rec's KV events as its
// discovery record publishes them (AddWorker, with the record's replay
// token). ingested: the worker's batches arrive through Ingest (an event
// plane such as NATS) and no socket is dialled; kv-approx follows no
// events. In kv mode a worker with neither is not followed: the policy
// routes it by approximation and, once it serves full blocks, raises
// kv_events_missing.
func (k *KV) FollowRecord(rec discovery.Record, ingested bool) error {
	endpoint, replay := rec.KVEvents.Endpoint, rec.KVEvents.ReplayEndpoint
	if ingested || k.name == "kv-approx" {
		endpoint, replay = "", ""
	}
	if endpoint == "" && !ingested && k.name == "kv" {
		return nil
	}
	if tok, err := hex.DecodeString(rec.KVEvents.ReplayToken); err == nil && len(tok) > 0 {
		k.SetReplayToken(rec.ID, tok)
	} else {
		k.SetReplayToken(rec.ID, nil) // none, or malformed: replay answers no history
	}
	return k.AddWorker(rec.ID, endpoint, replay, rec.KVLayout.BlockSize)
}
