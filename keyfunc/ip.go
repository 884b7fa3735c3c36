package keyfunc

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// DefaultIPv6Prefix is the prefix length IPv6 clients are grouped by: one
// /64 is what a single subscriber usually gets, so limiting per address
// would let one client use billions of keys.
const DefaultIPv6Prefix = 64

// UnixSocketKey is the key IP gives a request whose peer is on a Unix
// socket, such as a reverse proxy on the same host, when the client
// behind it is not known (no TrustUnixSocket, or no usable forwarding
// header). It is the same for every such request, so they share one
// limit, as requests through one untrusted TCP proxy share its address.
// No other key starts with "unix:", so it never equals a key of an
// address.
const UnixSocketKey = "unix:"

// IPOption configures IP.
type IPOption func(*ipConfig)

type ipConfig struct {
	trusted    []netip.Prefix
	header     string // single-value client IP header, "" for none
	forwarded  bool   // walk Forwarded instead of X-Forwarded-For
	trustUnix  bool   // a Unix-socket peer is a trusted proxy
	ipv6Prefix int
}

// TrustProxies names the proxies (CIDR prefixes or single addresses) whose
// forwarding headers are believed. It panics on an invalid entry, at
// start-up; use ParsePrefixes first to check configuration input. Without
// it (or TrustUnixSocket), forwarding headers are ignored and the key is
// the peer's address. An IPv4-mapped IPv6 entry (::ffff:10.0.0.0/104)
// names the IPv4 proxies it maps (10.0.0.0/8), as IP reads IPv4-mapped
// addresses as IPv4.
//
// Trust only the proxies in front of this server that overwrite or append
// to the header themselves (your load balancer, your CDN's published
// ranges): anything else lets clients choose their own key.
func TrustProxies(cidrs ...string) IPOption {
	prefixes := make([]netip.Prefix, len(cidrs))
	for i, s := range cidrs {
		p, err := parsePrefix(s)
		if err != nil {
			panic("keyfunc.TrustProxies: " + err.Error())
		}
		prefixes[i] = p
	}
	return TrustPrefixes(prefixes...)
}

// TrustPrefixes is TrustProxies for prefixes already parsed.
func TrustPrefixes(prefixes ...netip.Prefix) IPOption {
	return func(c *ipConfig) {
		for _, p := range prefixes {
			c.trusted = append(c.trusted, unmapPrefix(p.Masked()))
		}
	}
}

// ParsePrefixes parses CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") and
// single addresses ("192.0.2.1", taken as /32 or /128). An entry that is
// neither is an error that names it.
func ParsePrefixes(cidrs ...string) ([]netip.Prefix, error) {
	prefixes := make([]netip.Prefix, len(cidrs))
	for i, s := range cidrs {
		p, err := parsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("keyfunc: %w", err)
		}
		prefixes[i] = p
	}
	return prefixes, nil
}

// parsePrefix parses one entry of ParsePrefixes.
func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is neither an address nor a CIDR prefix; want one such as 192.0.2.1 or 10.0.0.0/8", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR prefix (%v); want one such as 10.0.0.0/8 or 2001:db8::/32", s, err)
	}
	return p, nil
}

// unmapPrefix returns an IPv4-mapped IPv6 prefix, masked, as the IPv4
// prefix it maps, and any other prefix as it is.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
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
// and X-Forwarded-For (or Forwarded, with UseForwarded) is walked as usual.
//
// Have one proxy set the header: where several append to it, the last value
// is the address of the proxy before the nearest, and all clients share it.
// For chains of proxies, walk X-Forwarded-For instead.
func TrustHeader(name string) IPOption {
	return func(c *ipConfig) { c.header = http.CanonicalHeaderKey(name) }
}

// UseForwarded makes IP walk the for= values of the RFC 7239 Forwarded
// header instead of X-Forwarded-For, which is then ignored. Like
// X-Forwarded-For, Forwarded counts only when the peer is a trusted proxy
// (TrustProxies, TrustUnixSocket), and it is walked the same way: from the
// right, element by element (its lines in order, the last line last),
// skipping addresses of trusted proxies, to the first that is not one.
// Without this option Forwarded is never read.
//
// Use it only if every proxy you trust maintains Forwarded, appending an
// element for the hop it received the request from (on a new line or
// after a comma). A client can send Forwarded and X-Forwarded-For itself,
// and a proxy passes on untouched the one it does not maintain, so IP must
// read only the one your proxies write, or the client's own copy decides
// its key.
//
// Each element is read as RFC 7239 defines it: parameters separated by
// semicolons, names in any case, values as tokens or quoted strings with
// backslash escapes. A for= value that is an address counts: IPv4 with or
// without a port ("192.0.2.60", "192.0.2.60:4711") or IPv6 in brackets
// with or without one (for="[2001:db8::1]:4711", quoted as RFC 7239
// requires); ports may be obfuscated ("_p1"). An unbracketed IPv6 address
// and an unquoted address with a port are accepted too. Empty elements are
// skipped.
//
// An element that has no for=, gives a parameter twice, has more than 16
// parameters or does not parse, and a for= value that is not an address
// ("unknown", an obfuscated "_hidden", anything else), stop the walk, as
// an entry that is not an address in X-Forwarded-For does: the client is
// the last address read (the nearest hop that could not say who sent it
// the request, or the peer). A client can write such values only to the
// left of what its proxy appended, where the walk does not reach, and
// cannot make text it wrote swallow the proxy's element (an unclosed
// quote, say): each line is read from its end.
func UseForwarded() IPOption {
	return func(c *ipConfig) { c.forwarded = true }
}

// TrustUnixSocket makes IP count a peer on a Unix socket as a trusted
// proxy, so that the client behind it is read from the forwarding headers
// as for a trusted TCP proxy (X-Forwarded-For or, with UseForwarded,
// Forwarded, walked from the right over TrustProxies; TrustHeader). When
// no header names a client, the key is UnixSocketKey. Without this option
// forwarding headers from a Unix-socket peer are ignored and every such
// request is keyed UnixSocketKey.
//
// Who can connect to the socket is decided by its file permissions (or,
// for an abstract socket, by the network namespace): use the option only
// when nothing but your reverse proxy can.
func TrustUnixSocket() IPOption {
	return func(c *ipConfig) { c.trustUnix = true }
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
// peer is a trusted proxy (TrustProxies, TrustUnixSocket), the client is
// the last value of the header named by TrustHeader if that is an
// address, else the first address in X-Forwarded-For (or, with
// UseForwarded, in Forwarded), read from the right, that is not itself a
// trusted proxy. Values a client wrote to the left of those its proxies
// added never count.
//
// A peer on a Unix socket has no address: net/http reports it as
// RemoteAddr "@" (Linux) or "" (elsewhere), or as the path the peer bound
// its socket to. Such a request is keyed UnixSocketKey, one key for all of
// them, unless TrustUnixSocket makes the peer a trusted proxy. A request
// is taken to come over a Unix socket when the address it was received on
// (the http.LocalAddrContextKey value net/http sets) is a Unix socket's,
// or, when that is not known, when RemoteAddr is "@" or "". Any other
// RemoteAddr that is not an address is an ErrNoKey error.
//
// The returned Func is safe for concurrent use; the options are read once,
// when IP is called.
func IP(opts ...IPOption) Func {
	c := newIPConfig(opts)
	return func(r *http.Request) (string, error) {
		peer, err := parseHost(r.RemoteAddr)
		if err != nil {
			if !fromUnixSocket(r) {
				return "", fmt.Errorf("%w: RemoteAddr %q: %v", ErrNoKey, r.RemoteAddr, err)
			}
			peer = netip.Addr{} // the invalid address stands for the Unix-socket peer
		}
		return c.key(c.client(r.Header, peer)), nil
	}
}

// IPOf is IP for a request that is not an *http.Request, such as a gRPC
// call: remoteAddr is the peer's address as http.Request.RemoteAddr
// writes it, unix reports a peer on a Unix socket (whose remoteAddr need
// not be an address), and values returns the values of a header (or
// metadata) field, matched in any case. It keys as IP does, with the same
// options, so the two give one client the same key. The returned function
// is safe for concurrent use.
func IPOf(opts ...IPOption) func(remoteAddr string, unix bool, values func(name string) []string) (string, error) {
	c := newIPConfig(opts)
	return func(remoteAddr string, unix bool, values func(name string) []string) (string, error) {
		peer, err := parseHost(remoteAddr)
		if err != nil {
			if !unix {
				return "", fmt.Errorf("%w: peer address %q: %v", ErrNoKey, remoteAddr, err)
			}
			peer = netip.Addr{}
		}
		return c.key(c.client(valuesFunc(values), peer)), nil
	}
}

// valuesFunc is a lookup of field values as a header.
type valuesFunc func(name string) []string

func (f valuesFunc) Values(name string) []string { return f(name) }

func newIPConfig(opts []IPOption) *ipConfig {
	c := &ipConfig{ipv6Prefix: DefaultIPv6Prefix}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// fromUnixSocket reports whether r, whose RemoteAddr is not an address,
// came over a Unix socket.
func fromUnixSocket(r *http.Request) bool {
	switch local := r.Context().Value(http.LocalAddrContextKey).(type) {
	case *net.UnixAddr:
		return true
	case nil:
		// Not served by net/http (a test, another server): go by the
		// spellings net/http gives an unnamed Unix-socket peer.
		return r.RemoteAddr == "@" || r.RemoteAddr == ""
	case net.Addr:
		return strings.HasPrefix(local.Network(), "unix")
	}
	return false
}

// key formats the client's key, grouping IPv6 by prefix, in one
// allocation.
func (c *ipConfig) key(a netip.Addr) string {
	if !a.IsValid() {
		return UnixSocketKey
	}
	buf := make([]byte, 0, 64)
	buf = append(buf, "ip:"...)
	if a.Is4() || c.ipv6Prefix == 128 {
		return string(a.AppendTo(buf))
	}
	p, _ := a.Prefix(c.ipv6Prefix) // cannot fail: 1..128 on an IPv6 address
	return string(p.AppendTo(buf))
}

// header is where client reads forwarding fields: an http.Header, or
// IPOf's lookup.
type header interface{ Values(name string) []string }

// client returns the client address behind peer, the invalid address for
// the Unix-socket peer. Forwarding fields count only when peer is a
// trusted proxy: then the TrustHeader value if it is an address, else the
// walk of Forwarded (UseForwarded) or X-Forwarded-For.
func (c *ipConfig) client(h header, peer netip.Addr) netip.Addr {
	if !c.isTrusted(peer) {
		return peer
	}
	if c.header != "" {
		if a, ok := lastValue(h.Values(c.header)); ok {
			return a
		}
	}
	if c.forwarded {
		return c.walkForwarded(h.Values("Forwarded"), peer)
	}
	return c.walkXFF(h.Values("X-Forwarded-For"), peer)
}

// isTrusted reports whether a is a trusted proxy; the invalid address is
// the Unix-socket peer.
func (c *ipConfig) isTrusted(a netip.Addr) bool {
	if !a.IsValid() {
		return c.trustUnix
	}
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
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
