package doctor

import (
	"net/netip"
	"strings"
	"testing"
)

// Rows as the kernel prints them (tcp4_seq_show, tcp6_seq_show): a
// listener on 127.0.0.1:8080, one on 0.0.0.0:22, an established
// connection, and tcp6 listeners on [::1]:9090 and a v4-mapped address.
const (
	procTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 12345 1 0000000000000000 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 333 1 0000000000000000 20 4 30 10 -1
`
	procTCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:2382 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 444 1 0000000000000000 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 555 1 0000000000000000 100 0 0 10 0
`
)

func TestParseProcNetTCP(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []listenSocket
		bad      bool
	}{
		{name: "tcp", in: procTCP, want: []listenSocket{
			{netip.MustParseAddrPort("127.0.0.1:8080"), 12345}, {netip.MustParseAddrPort("0.0.0.0:22"), 222}}},
		{name: "tcp6", in: procTCP6, want: []listenSocket{
			{netip.MustParseAddrPort("[::1]:9090"), 444}, {netip.MustParseAddrPort("127.0.0.1:80"), 555}}},
		{name: "header only", in: strings.SplitN(procTCP, "\n", 2)[0] + "\n"},
		{name: "no trailing newline", in: strings.TrimSuffix(procTCP, "\n"), want: []listenSocket{
			{netip.MustParseAddrPort("127.0.0.1:8080"), 12345}, {netip.MustParseAddrPort("0.0.0.0:22"), 222}}},
		{name: "empty", in: "", want: nil},
		{name: "no header", in: strings.SplitN(procTCP, "\n", 2)[1], bad: true},
		{name: "short row", in: "sl\n 0: 0100007F:1F90 0A\n", bad: true},
		{name: "bad port", in: "sl\n 0: 0100007F:XYZ 00000000:0000 0A 0:0 0:0 0 0 0 1\n", bad: true},
		{name: "port over 16 bits", in: "sl\n 0: 0100007F:1FFFF 00000000:0000 0A 0:0 0:0 0 0 0 1\n", bad: true},
		{name: "odd address", in: "sl\n 0: 0100007:1F90 00000000:0000 0A 0:0 0:0 0 0 0 1\n", bad: true},
		{name: "bad inode", in: "sl\n 0: 0100007F:1F90 00000000:0000 0A 0:0 0:0 0 0 0 -1\n", bad: true},
		{name: "long line", in: "sl\n" + strings.Repeat("x", maxProcNetLine+1) + "\n", bad: true},
	} {
		got, err := parseProcNetTCP(strings.NewReader(tc.in))
		if (err != nil) != tc.bad {
			t.Errorf("%s: err %v", tc.name, err)
			continue
		}
		if tc.bad {
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: row %d = %v, want %v", tc.name, i, got[i], tc.want[i])
			}
		}
	}
}

func FuzzParseProcNetTCP(f *testing.F) {
	for _, s := range []string{procTCP, procTCP6, "", "sl\n", "sl\n 0: 0100007F:1F90 00000000:0000 0A 0:0 0:0 0 0 0 1\n",
		"sl\n 0: :1F90 : 0A 0:0 0:0 0 0 0 1\n", "sl\n 0: 0100007F: 0 0A\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		socks, err := parseProcNetTCP(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, k := range socks {
			if !k.Addr.Addr().IsValid() {
				t.Fatalf("%q: invalid address in %v", s, k)
			}
		}
		if len(socks) > strings.Count(s, "\n")+1 {
			t.Fatalf("%q: %d sockets from fewer rows", s, len(socks))
		}
	})
}

func TestSameHost(t *testing.T) {
	for _, tc := range []struct {
		mode, url string
		want, bad bool
	}{
		{"auto", "http://127.0.0.1:8000", true, false},
		{"", "https://localhost:8000", true, false},
		{"auto", "http://[::1]:8000", true, false},
		{"auto", "http://10.0.0.5:8000", false, false},
		{"auto", "http://fe.example:8000", false, false},
		{"on", "http://10.0.0.5:8000", true, false},
		{"off", "http://127.0.0.1:8000", false, false},
		{"yes", "http://127.0.0.1:8000", false, true},
	} {
		got, err := sameHost(tc.mode, tc.url)
		if got != tc.want || (err != nil) != tc.bad {
			t.Errorf("sameHost(%q, %q) = %v, %v", tc.mode, tc.url, got, err)
		}
	}
}
