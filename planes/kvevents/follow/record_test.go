package follow

import (
	"testing"

	"github.com/tandemllm/tandem/control/discovery"
)

// recPolicy records what Record tells a policy.
type recPolicy struct {
	name   string
	added  []string
	shares map[string]discovery.KVShare
}

func (p *recPolicy) Name() string                  { return p.name }
func (p *recPolicy) SetReplayToken(string, []byte) {}
func (p *recPolicy) AddWorker(id, _, _ string, _ int) error {
	p.added = append(p.added, id)
	return nil
}
func (p *recPolicy) SetShareGroups(id, host, disk string) {
	p.shares[id] = discovery.KVShare{Host: host, Disk: disk}
}

// TestRecordShareGroups: a record's shared KV tiers reach a policy that
// groups workers (ShareGrouper), including a record that names none (a
// worker re-registered without them leaves its groups); a worker that is
// not followed is not grouped.
func TestRecordShareGroups(t *testing.T) {
	tests := []struct {
		name     string
		endpoint string
		share    discovery.KVShare
		grouped  bool
	}{
		{"host and disk", "tcp://h:1", discovery.KVShare{Host: "h/pool0", Disk: "native:h:/kv"}, true},
		{"none", "tcp://h:1", discovery.KVShare{}, true},
		{"not followed (no endpoint)", "", discovery.KVShare{Host: "h/pool0"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &recPolicy{name: "kv", shares: map[string]discovery.KVShare{}}
			rec := discovery.Record{ID: "w1", KVShare: tc.share}
			rec.KVEvents.Endpoint = tc.endpoint
			if err := Record(p, rec, false); err != nil {
				t.Fatal(err)
			}
			got, ok := p.shares["w1"]
			if ok != tc.grouped || got != (map[bool]discovery.KVShare{true: tc.share}[tc.grouped]) {
				t.Fatalf("groups %+v (set %v), want %+v (set %v)", got, ok, tc.share, tc.grouped)
			}
		})
	}
}
