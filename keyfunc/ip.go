package keyfunc

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// DefaultIPv6Prefix is the prefix length IPv6 clients are grouped by: one
// /64 is what a single subscriber usually gets, so limiting per address
// would let one client use billions of keys.
const DefaultIPv6Prefix = 64

// IPOption configures IP.
type IPOption func(*ipConfig)

type ipConfig struct {
	trusted    []netip.Prefix
	header     string // single-value client IP header, "" for none
	ipv6Prefix int
}

// TrustProxies names the proxies (CIDR prefixes or single addresses) whose
// forwarding headers are believed. It panics on an invalid entry, at
// start-up; use ParsePrefixes first to check configuration input. Without
// it, forwarding headers are ignored and the key is the peer's address.
//
// Trust only the proxies in front of this server that overwrite or append
// to the header themselves (your load balancer, your CDN's published
// ranges): anything else lets clients choose their own key.
func TrustProxies(cidrs ...string) IPOption {
	prefixes, err := ParsePrefixes(cidrs...)
	if err != nil {
		panic("keyfunc.TrustProxies: " + err.Error())
	}
	return TrustPrefixes(prefixes...)
}

// TrustPrefixes is TrustProxies for prefixes already parsed.
func TrustPrefixes(prefixes ...netip.Prefix) IPOption {
	return func(c *ipConfig) {
		for _, p := range prefixes {
			c.trusted = append(c.trusted, p.Masked())
		}
	}
}

// ParsePrefixes parses CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") and
// single addresses ("192.0.2.1", taken as /32 or /128).
func ParsePrefixes(cidrs ...string) ([]netip.Prefix, error) {
	prefixes := make([]netip.Prefix, 0, len(cidrs))
	for _, s := range cidrs {
		s = strings.TrimSpace(s)
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("%q is neither an address nor a CIDR prefix", s)
			}
			a = a.Unmap()
			prefixes = append(prefixes, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR prefix: %v", s, err)
		}
		prefixes = append(prefixes, p)
	}
	return prefixes, nil
}

// TrustHeader makes IP read the client address from a single-value header a
// trusted proxy sets, such as "X-Real-IP" or "CF-Connecting-IP", instead of
// walking X-Forwarded-For. It counts only when the peer is a trusted proxy.
//
// The value used is the last one: the last comma-separated entry of the
// header's last line. A proxy that replaces the header leaves only its own
// value; a proxy that appends (a new line, or ", value" on the last line)
// puts its own value last. Every earlier value may have been written by the
// client and is ignored, so a client cannot choose its key by sending the
// header itself. When the header is missing or its last value is empty or
// not an address, the header is ignored (an earlier value is never used)
// and X-Forwarded-For is walked as usual.
//
// Have one proxy set the header: where several append to it, the last value
// is the address of the proxy before the nearest, and all clients share it.
// For chains of proxies, walk X-Forwarded-For instead.
func TrustHeader(name string) IPOption {
	return func(c *ipConfig) { c.header = http.CanonicalHeaderKey(name) }
}

// IPv6Prefix sets the prefix length, 1 to 128, by which IPv6 clients are
// grouped; 128 keys each address on its own. The default is
// DefaultIPv6Prefix. It panics on a length out of range.
func IPv6Prefix(bits int) IPOption {
	if bits < 1 || bits > 128 {
		panic(fmt.Sprintf("keyfunc.IPv6Prefix(%d): want 1 to 128", bits))
	}
	return func(c *ipConfig) { c.ipv6Prefix = bits }
}

// IP keys requests by client address: "ip:203.0.113.7", or for IPv6 the
// client's prefix, "ip:2001:db8:1:2::/64". IPv4-mapped IPv6 addresses count
// as IPv4.
//
// By default the client is the peer, r.RemoteAddr, and forwarding headers
// are ignored: a client cannot forge its way into another key. When the
// peer is a trusted proxy (TrustProxies), the client is the last value of
// the header named by TrustHeader if that is an address, else the first
// address in X-Forwarded-For, read from the right, that is not itself a
// trusted proxy. Values a client wrote to the left of those its proxies
// added never count. An unparsable RemoteAddr is an ErrNoKey error.
func IP(opts ...IPOption) Func {
	c := ipConfig{ipv6Prefix: DefaultIPv6Prefix}
	for _, opt := range opts {
		opt(&c)
	}
	return func(r *http.Request) (string, error) {
		peer, err := parseHost(r.RemoteAddr)
		if err != nil {
			return "", fmt.Errorf("%w: RemoteAddr %q: %v", ErrNoKey, r.RemoteAddr, err)
		}
		return c.key(c.client(r, peer)), nil
	}
}

// client returns the client address behind peer.
func (c *ipConfig) client(r *http.Request, peer netip.Addr) netip.Addr {
	if !c.isTrusted(peer) {
		return peer
	}
	if c.header != "" {
		if a, ok := lastValue(r.Header.Values(c.header)); ok {
			return a
		}
	}
	// Walk X-Forwarded-For from the right: each entry was appended by the
	// hop to its right. Stop at the first hop that is not ours.
	client := peer
	values := r.Header.Values("X-Forwarded-For")
	for i := len(values) - 1; i >= 0; i-- {
		entries := values[i]
		for entries != "" {
			var entry string
			if j := strings.LastIndexByte(entries, ','); j >= 0 {
				entry, entries = entries[j+1:], entries[:j]
			} else {
				entry, entries = entries, ""
			}
			a, err := parseHost(strings.TrimSpace(entry))
			if err != nil {
				return client // garbage from a trusted hop: keep the last good one
			}
			client = a
			if !c.isTrusted(a) {
				return a
			}
		}
	}
	return client // every hop is trusted: the leftmost is the client
}

// lastValue parses the last comma-separated value of the last of a
// single-value header's lines: the one the nearest trusted proxy set.
// Earlier values, which the client may have sent, are never looked at.
func lastValue(lines []string) (netip.Addr, bool) {
	if len(lines) == 0 {
		return netip.Addr{}, false
	}
	v := lines[len(lines)-1]
	if i := strings.LastIndexByte(v, ','); i >= 0 {
		v = v[i+1:]
	}
	a, err := parseHost(strings.TrimSpace(v))
	return a, err == nil
}

func (c *ipConfig) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// key formats the client's key, grouping IPv6 by prefix, in one
// allocation.
func (c *ipConfig) key(a netip.Addr) string {
	buf := make([]byte, 0, 64)
	buf = append(buf, "ip:"...)
	if a.Is4() || c.ipv6Prefix == 128 {
		return string(a.AppendTo(buf))
	}
	p, _ := a.Prefix(c.ipv6Prefix) // cannot fail: 1..128 on an IPv6 address
	return string(p.AppendTo(buf))
}

// parseHost parses "addr", "addr:port" or "[addr]:port", drops any zone,
// and unmaps IPv4-mapped IPv6 addresses.
func parseHost(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, fmt.Errorf("empty address")
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		s = s[1 : len(s)-1] // "[2001:db8::1]" without a port
	}
	// With a port ("[v6]:p" or "v4:p", as in RemoteAddr) or without one
	// (as in X-Forwarded-For): try the likelier form first, since a failed
	// parse allocates its error.
	if s[0] == '[' || strings.Count(s, ":") == 1 {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return ap.Addr().WithZone("").Unmap(), nil
		}
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, err
	}
	return a.WithZone("").Unmap(), nil
}
