package follow

import (
	"encoding/hex"

	"github.com/tandemllm/tandem/control/discovery"
)

// Policy is the KV policy that follows workers' events (router.KV), as
// Record uses it.
type Policy interface {
	Name() string
	SetReplayToken(id string, token []byte)
	AddWorker(id, endpoint, replayEndpoint string, blockSize int) error
}

// Record has kv follow worker rec's KV events as its discovery record
// publishes them (AddWorker, with the record's replay token, and the
// shared tiers it names: ShareGrouper). ingested: the
// worker's batches arrive through Ingest (an event plane such as NATS) and
// no socket is dialled; kv-approx follows no events. In kv mode a worker
// with neither is not followed: the policy routes it by approximation and,
// once it serves full blocks, raises kv_events_missing.
func Record(kv Policy, rec discovery.Record, ingested bool) error {
	endpoint, replay := rec.KVEvents.Endpoint, rec.KVEvents.ReplayEndpoint
	if ingested || kv.Name() == "kv-approx" {
		endpoint, replay = "", ""
	}
	if endpoint == "" && !ingested && kv.Name() == "kv" {
		return nil
	}
	if tok, err := hex.DecodeString(rec.KVEvents.ReplayToken); err == nil && len(tok) > 0 {
		kv.SetReplayToken(rec.ID, tok)
	} else {
		kv.SetReplayToken(rec.ID, nil) // none, or malformed: replay answers no history
	}
	if err := kv.AddWorker(rec.ID, endpoint, replay, rec.KVLayout.BlockSize); err != nil {
		return err
	}
	if g, ok := kv.(ShareGrouper); ok {
		g.SetShareGroups(rec.ID, rec.KVShare.Host, rec.KVShare.Disk)
	}
	return nil
}

// ShareGrouper is a Policy that knows which workers share a lower KV tier
// (router.KV): Record tells it the groups the worker's record names
// (discovery.KVShare), so workers in other processes that share a host's
// memory pool or disk directory are one group.
type ShareGrouper interface {
	SetShareGroups(id, host, disk string)
}
