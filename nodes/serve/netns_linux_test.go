//go:build linux

package serve

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/internal/netnstest"
)

// netnsPair is two network namespaces joined by a veth pair:
// AddrA on A's end, AddrB on B's end (a private /30).
type netnsPair struct {
	A, B         string // namespace names
	DevA, DevB   string // veth ends
	AddrA, AddrB string
}

// requireNetns skips t unless it runs as root with ip and tc available.
func requireNetns(t *testing.T) {
	t.Helper()
	// The test times an 80 ms TTFT to within 10%: it needs the machine to
	// itself, so it runs only when asked (.ci/run does, in a step of its
	// own), not inside a parallel `go test ./...`.
	if os.Getenv("TANDEM_NETNS_TESTS") != "1" {
		t.Skip("set TANDEM_NETNS_TESTS=1 to run the shaped-link tests (they need root, ip and tc, and a quiet machine)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces (ip netns, tc)")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (iproute2) to build the shaped link: %v", tool, err)
		}
	}
}

func runCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newNetnsPair creates the namespaces and the veth pair, unique to this
// process, and deletes them when t ends. Each veth end's egress is shaped
// with tc qdisc args tcArgs (none: unshaped).
func newNetnsPair(t *testing.T, tcArgs ...string) *netnsPair {
	t.Helper()
	pid := os.Getpid()
	p := &netnsPair{
		A: fmt.Sprintf("tdm-a-%d", pid), B: fmt.Sprintf("tdm-b-%d", pid),
		DevA: fmt.Sprintf("tdma%d", pid), DevB: fmt.Sprintf("tdmb%d", pid),
		AddrA: "10.231.77.1", AddrB: "10.231.77.2",
	}
	for _, ns := range []string{p.A, p.B} {
		runCmd(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	runCmd(t, "ip", "link", "add", p.DevA, "netns", p.A, "type", "veth", "peer", "name", p.DevB, "netns", p.B)
	for _, e := range []struct{ ns, dev, addr string }{{p.A, p.DevA, p.AddrA}, {p.B, p.DevB, p.AddrB}} {
		runCmd(t, "ip", "-n", e.ns, "addr", "add", e.addr+"/30", "dev", e.dev)
		runCmd(t, "ip", "-n", e.ns, "link", "set", e.dev, "up")
		runCmd(t, "ip", "-n", e.ns, "link", "set", "lo", "up")
		if len(tcArgs) > 0 {
			runCmd(t, append([]string{"ip", "netns", "exec", e.ns, "tc", "qdisc", "add", "dev", e.dev, "root"}, tcArgs...)...)
		}
	}
	return p
}

// listenIn and dialIn are kvtransfer's Listen and Dial hooks for sockets
// in namespace ns.
func listenIn(ns string) func(network, addr string) (net.Listener, error) {
	return func(network, addr string) (l net.Listener, err error) {
		err = netnstest.Run(ns, func() error { l, err = net.Listen(network, addr); return err })
		return l, err
	}
}

func dialIn(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = netnstest.Run(ns, func() error {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}
