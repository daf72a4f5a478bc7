package vllmpd

import "testing"

func TestPeersAllow(t *testing.T) {
	cases := []struct {
		spec, host string
		port       int
		ok         bool
	}{
		{"loopback", "127.0.0.1", 8000, true},
		{"loopback", "127.9.9.9", 1, true},
		{"loopback", "::1", 1, true},
		{"loopback", "10.0.0.1", 8000, false},
		{"loopback", "localhost", 8000, false}, // names are never resolved
		{"10.1.0.0/16", "10.1.2.3", 5, true},
		{"10.1.0.0/16", "10.2.0.1", 5, false},
		{"10.0.0.7", "10.0.0.7", 9, true},
		{"10.0.0.7", "::ffff:10.0.0.7", 9, true},
		{"prefill-0.svc:7000", "prefill-0.svc", 7000, true},
		{"prefill-0.svc:7000", "prefill-0.svc", 7001, false},
		{"Prefill-1.svc", "prefill-1.svc", 1, true},
		{"any", "203.0.113.9", 1, true},
		{"", "127.0.0.1", 1, false},
	}
	for _, tc := range cases {
		p, err := ParsePeers(tc.spec)
		if err != nil {
			t.Fatalf("%q: %v", tc.spec, err)
		}
		if err := p.Allow(tc.host, tc.port); (err == nil) != tc.ok {
			t.Errorf("%q allows %s:%d: %v, want %v", tc.spec, tc.host, tc.port, err, tc.ok)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "a b", "[::1"} {
		if _, err := ParsePeers(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	var none *Peers
	if none.Allow("127.0.0.1", 1) == nil {
		t.Error("a nil peer list allowed a pull")
	}
}

func FuzzParsePeers(f *testing.F) {
	for _, s := range []string{"loopback", "any", "10.0.0.0/8,h:1", "::1", "[::1]:80", "a,b,,c", "1.2.3.4/0"} {
		f.Add(s, "10.0.0.1", 80)
	}
	f.Fuzz(func(t *testing.T, spec, host string, port int) {
		p, err := ParsePeers(spec)
		if err != nil {
			return
		}
		_ = p.Allow(host, port)
	})
}
