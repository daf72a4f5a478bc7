package event

import (
	"fmt"
	"net/netip"
	"strings"
)

// ParseAllow parses --kv-events-allow values: CIDRs or single addresses.
func ParseAllow(values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if p, err := netip.ParsePrefix(s); err == nil {
				out = append(out, p.Masked())
				continue
			}
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("kvevents: allowed network %q: want a CIDR (10.0.0.0/8) or an address", s)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return out, nil
}
