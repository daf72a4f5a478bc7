package vllmpd

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
)

// PeersLoopback is the default --kv-transfer-peers: side channels on this
// host only (the side channel's own default listen address).
const PeersLoopback = "loopback"

// PeersAny lets a decode leg pull from any remote_host:remote_port (the
// behaviour of vLLM's own connector; unsafe where clients can reach the
// worker's API, since the pull carries a transfer token).
const PeersAny = "any"

// Peers is the set of side channels a decode leg may pull from. A
// request's kv_transfer_params name remote_host and remote_port, and
// whoever sends the request chooses them: the worker connects, and hands
// a transfer token for its own KV node, only to addresses its operator
// listed (or, in one process, the side channels of its own workers).
// This is the vLLM-protocol form of the KV transfer plane's rule that a
// worker sends only to addresses discovery published: a vLLM server has
// no discovery, so the list is explicit, as --kv-events-allow is.
type Peers struct {
	any  bool
	nets []netip.Prefix

	mu    sync.RWMutex
	addrs map[string]bool // host:port, exactly as remote_host:remote_port
	hosts map[string]bool // host names, any port
}

// ParsePeers reads a comma-separated list of "loopback", "any", IP
// addresses, CIDR prefixes, host names and host:port pairs.
func ParsePeers(spec string) (*Peers, error) {
	p := &Peers{addrs: map[string]bool{}, hosts: map[string]bool{}}
	for _, f := range strings.Split(spec, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
		case f == PeersAny:
			p.any = true
		case f == PeersLoopback:
			p.nets = append(p.nets, netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"))
		case strings.Contains(f, "/"):
			pr, err := netip.ParsePrefix(f)
			if err != nil {
				return nil, fmt.Errorf("vllmpd: peer %q: %w", f, err)
			}
			p.nets = append(p.nets, pr.Masked())
		default:
			if a, err := netip.ParseAddr(f); err == nil {
				p.nets = append(p.nets, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
				continue
			}
			if h, port, err := net.SplitHostPort(f); err == nil && h != "" && port != "" {
				p.addrs[net.JoinHostPort(h, port)] = true
				continue
			}
			if strings.ContainsAny(f, " :[]") {
				return nil, fmt.Errorf("vllmpd: peer %q is not an address, a prefix, a host or host:port", f)
			}
			p.hosts[strings.ToLower(f)] = true
		}
	}
	return p, nil
}

// Add allows one side channel address (a worker of this process).
func (p *Peers) Add(addr string) {
	p.mu.Lock()
	p.addrs[addr] = true
	p.mu.Unlock()
}

// Allow reports whether a decode leg may pull from host:port. Host names
// are matched as written, never resolved: a name the client chose must
// not reach an allowed network through its own DNS.
func (p *Peers) Allow(host string, port int) error {
	if p == nil {
		return fmt.Errorf("no side channel is allowed")
	}
	if p.any {
		return nil
	}
	addr := net.JoinHostPort(host, fmt.Sprint(port))
	p.mu.RLock()
	ok := p.addrs[addr] || p.hosts[strings.ToLower(host)]
	p.mu.RUnlock()
	if ok {
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		for _, n := range p.nets {
			if n.Contains(a) {
				return nil
			}
		}
	}
	return fmt.Errorf("%s is not a side channel this worker may pull from (--kv-transfer-peers)", addr)
}
