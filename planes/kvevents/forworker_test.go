package kvevents

import "testing"

// TestForWorker: worker i publishes at the PUB port + i; "auto" replay
// sits beside it on any free port, moved to loopback while token ids are
// published to nobody allowed; "off" is none; a fixed replay endpoint is
// offset too; a disabled config is left alone.
func TestForWorker(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ev          EngineConfig
		i           int
		pub, replay string
	}{
		{"auto loopback", EngineConfig{Enabled: true, Endpoint: "tcp://0.0.0.0:5557", ReplayEndpoint: "auto"}, 2, "tcp://0.0.0.0:5559", "tcp://127.0.0.1:0"},
		{"auto no token ids", EngineConfig{Enabled: true, Endpoint: "tcp://10.0.0.1:5557", ReplayEndpoint: "auto", OmitTokenIDs: true}, 0, "tcp://10.0.0.1:5557", "tcp://10.0.0.1:0"},
		{"off", EngineConfig{Enabled: true, Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "off"}, 1, "tcp://127.0.0.1:0", ""},
		{"fixed", EngineConfig{Enabled: true, Endpoint: "tcp://127.0.0.1:5557", ReplayEndpoint: "tcp://127.0.0.1:5600"}, 1, "tcp://127.0.0.1:5558", "tcp://127.0.0.1:5601"},
		{"inproc", EngineConfig{Enabled: true, Endpoint: "inproc://w", ReplayEndpoint: "auto", OmitTokenIDs: true}, 0, "inproc://w", "inproc://w_replay"},
		{"disabled", EngineConfig{Endpoint: "tcp://127.0.0.1:5557", ReplayEndpoint: "auto"}, 3, "tcp://127.0.0.1:5557", "auto"},
	} {
		got, err := ForWorker(tc.ev, tc.i)
		if err != nil || got.Endpoint != tc.pub || got.ReplayEndpoint != tc.replay {
			t.Errorf("%s: %q %q %v, want %q %q", tc.name, got.Endpoint, got.ReplayEndpoint, err, tc.pub, tc.replay)
		}
	}
}
