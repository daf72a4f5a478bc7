package discovery

import (
	"net"
	"net/url"
	"strings"
)

// Advertise turns a bound host:port into one others can dial: a wildcard
// host becomes host.
func Advertise(addr, host string) string {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(h); h == "" || h == "*" || (ip != nil && ip.IsUnspecified()) {
		h = host
	}
	return net.JoinHostPort(h, p)
}

// AdvertiseURL does the same for a ZMQ endpoint ("tcp://*:5557").
func AdvertiseURL(endpoint, host string) string {
	if endpoint == "" {
		return ""
	}
	u, err := url.Parse(strings.Replace(endpoint, "://*:", "://0.0.0.0:", 1))
	if err != nil || u.Host == "" {
		return endpoint
	}
	u.Host = Advertise(u.Host, host)
	return u.String()
}
