package main

import (
	"strings"
	"testing"
)

// TestReplayLimitFlags: the replay socket's caps are flags, checked before
// anything starts; a nonsensical one is refused naming the flag.
func TestReplayLimitFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--kv-events-replay-max-conns", "0"},
		{"--kv-events-replay-max-conns", "4", "--kv-events-replay-max-per-source", "8"},
		{"--kv-events-replay-handshake-timeout", "0s"},
	} {
		out, err := runCLI(t, append([]string{"serve", "--http-addr", "127.0.0.1:0"}, args...)...)
		if err == nil || !strings.Contains(err.Error()+out, "--kv-events-replay-max-conns") {
			t.Errorf("%v: err %v, out %q", args, err, out)
		}
	}
}
