//go:build linux && netns

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/internal/netnstest"
)

// TestAttacksNetns is TestAttacks with the workers in a network namespace
// of their own and the attacker in another, joined by a veth pair: the
// stranger is on another host as far as the kernel can tell. It needs
// root and ip (iproute2) and changes the host's network set-up, so it is
// built only with the netns tag (.ci/run: go test -tags netns -run
// TestAttacksNetns ./e2e).
func TestAttacksNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("needs ip (iproute2): %v", err)
	}
	if secure.on {
		t.Skip("runs its own open and protected configurations")
	}
	pid := os.Getpid()
	victimNS, attackerNS := fmt.Sprintf("tdm-atkv-%d", pid), fmt.Sprintf("tdm-atka-%d", pid)
	devV, devA := fmt.Sprintf("tdmv%d", pid), fmt.Sprintf("tdmx%d", pid)
	const victimAddr, attackerAddr = "10.231.78.1", "10.231.78.2"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{victimNS, attackerNS} {
		run("ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	run("ip", "link", "add", devV, "netns", victimNS, "type", "veth", "peer", "name", devA, "netns", attackerNS)
	for _, e := range []struct{ ns, dev, addr string }{{victimNS, devV, victimAddr}, {attackerNS, devA, attackerAddr}} {
		run("ip", "-n", e.ns, "addr", "add", e.addr+"/30", "dev", e.dev)
		run("ip", "-n", e.ns, "link", "set", e.dev, "up")
		run("ip", "-n", e.ns, "link", "set", "lo", "up")
	}
	runAttacks(t, attackNet{
		victimHost: victimAddr, attackerHost: attackerAddr,
		start: func(t *testing.T, name, args string) *osProc {
			return startProcWith(t, name, args, workerReady, []string{"ip", "netns", "exec", victimNS})
		},
		startReady: func(t *testing.T, name, args string, ready *regexp.Regexp) *osProc {
			return startProcWith(t, name, args, ready, []string{"ip", "netns", "exec", victimNS})
		},
		dial: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = netnstest.Run(attackerNS, func() error {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
		listen: func(network, addr string) (l net.Listener, err error) {
			err = netnstest.Run(attackerNS, func() error { l, err = net.Listen(network, addr); return err })
			return l, err
		},
	})
}
