package kvevents

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// ForWorker gives in-process worker i of a process its publisher
// settings from the process's ev: its own ports (the PUB endpoint's port
// + i, and the replay endpoint's), the replay endpoint "auto" resolved
// beside the PUB endpoint (on loopback while events carry token ids and
// no ReplayAllow widens it) and "off" to none. A disabled ev is returned
// as it is.
func ForWorker(ev EngineConfig, i int) (EngineConfig, error) {
	if !ev.Enabled {
		return ev, nil
	}
	var err error
	if ev.Endpoint, err = OffsetEndpointPort(ev.Endpoint, i); err != nil {
		return ev, fmt.Errorf("--kv-events-endpoint: %w", err)
	}
	switch ev.ReplayEndpoint {
	case "off", "":
		ev.ReplayEndpoint = ""
	case "auto":
		// On by default: Tandem owns this publisher, and replay is what
		// turns a dropped batch or a reconnect into no loss at all. Past
		// batches with token ids are prompts: without
		// --kv-events-replay-allow the socket stays on loopback, where
		// the worker's own relay reads it.
		ev.ReplayEndpoint = autoReplay(ev.Endpoint)
		if !ev.OmitTokenIDs && len(ev.ReplayAllow) == 0 {
			ev.ReplayEndpoint = loopbackReplay(ev.ReplayEndpoint)
		}
	default:
		if ev.ReplayEndpoint, err = OffsetEndpointPort(ev.ReplayEndpoint, i); err != nil {
			return ev, fmt.Errorf("--kv-events-replay-endpoint: %w", err)
		}
	}
	return ev, nil
}

// autoReplay is the replay endpoint beside pub: the same host, any free
// port (tcp), or a sibling name (inproc).
func autoReplay(pub string) string {
	if rest, ok := strings.CutPrefix(pub, "tcp://"); ok {
		if host, _, err := net.SplitHostPort(rest); err == nil {
			return "tcp://" + net.JoinHostPort(host, "0")
		}
	}
	if strings.HasPrefix(pub, "inproc://") {
		return pub + "_replay"
	}
	return ""
}

// loopbackReplay moves a tcp replay endpoint whose host is not a loopback
// address to 127.0.0.1 (any free port).
func loopbackReplay(ep string) string {
	rest, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return ep
	}
	host, _, err := net.SplitHostPort(rest)
	if err != nil {
		return ep
	}
	if a, err := netip.ParseAddr(host); (err == nil && a.IsLoopback()) || host == "localhost" {
		return ep
	}
	return "tcp://127.0.0.1:0"
}
