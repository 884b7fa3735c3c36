package keyfunc

import (
	"net/netip"
	"strings"
)

// The walk through the forwarding fields of trusted proxies, which client
// (ip.go) takes when the peer is one: TrustHeader's field, X-Forwarded-For,
// or Forwarded (parsed in rfc7239.go).

// walkXFF walks the X-Forwarded-For lines from the right, starting from
// the trusted peer: each entry was appended by the hop to its right. It
// stops at the first hop that is not a trusted proxy, or at an entry that
// is not an address (an empty one included), where the last address read
// is the client.
func (c *ipConfig) walkXFF(lines []string, peer netip.Addr) netip.Addr {
	client := peer
	for i := len(lines) - 1; i >= 0; i-- {
		for rest := lines[i]; rest != ""; {
			var entry string
			if j := strings.LastIndexByte(rest, ','); j >= 0 {
				rest, entry = rest[:j], rest[j+1:]
			} else {
				rest, entry = "", rest
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

// walkForwarded walks the for= values of the Forwarded lines from the
// right, as walkXFF walks X-Forwarded-For, starting from the trusted
// peer. Empty elements are skipped; an element without a usable for=, or
// whose for= is not an address, stops the walk at the last address read.
func (c *ipConfig) walkForwarded(lines []string, peer netip.Addr) netip.Addr {
	client := peer
	for i := len(lines) - 1; i >= 0; i-- {
		for rest := lines[i]; rest != ""; {
			var element string
			rest, element = lastElement(rest)
			element = trimOWS(element)
			if element == "" {
				continue // an empty list element, which RFC 9110 says to ignore
			}
			node, ok := forwardedFor(element)
			if !ok {
				return client // no usable for=: keep the last good hop
			}
			a, ok := parseNode(node)
			if !ok {
				return client // "unknown", obfuscated or garbage: the same
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
