package keyfunc

import (
	"net/netip"
	"strings"
)

// lastElement cuts the last element off a Forwarded line: it returns the
// text before the last comma outside a quoted string, and the text after
// it. It reads from the end of the line, so an element a proxy appended
// is found whatever a client wrote before it (an unclosed quote
// included): inside a quoted string, a quote preceded by an odd number of
// backslashes is escaped, any other opens the string. For a line that
// parses, this agrees with reading it from the start.
func lastElement(line string) (before, element string) {
	quoted := false
	for i := len(line) - 1; i >= 0; i-- {
		switch line[i] {
		case '"':
			if !quoted {
				quoted = true
				continue
			}
			n := 0
			for j := i - 1; j >= 0 && line[j] == '\\'; j-- {
				n++
			}
			if n%2 == 0 {
				quoted = false
			}
		case ',':
			if !quoted {
				return line[:i], line[i+1:]
			}
		}
	}
	return "", line
}

// forwardedFor returns the for= value of one Forwarded element, unquoted,
// and whether the element parsed, gave for= exactly once and no parameter
// twice. An element of more than maxForwardedPairs parameters does not
// parse, which bounds the search for duplicates.
func forwardedFor(element string) (string, bool) {
	var seen [maxForwardedPairs]string
	names := seen[:0]
	var node string
	found := false
	for p := skipOWS(element, 0); p < len(element); p = skipOWS(element, p) {
		if element[p] == ';' { // an empty pair, or the end of one
			p++
			continue
		}
		name, value, end, ok := forwardedPair(element, p)
		if !ok || len(names) == maxForwardedPairs {
			return "", false
		}
		for _, n := range names {
			if strings.EqualFold(n, name) {
				return "", false // a parameter given twice
			}
		}
		names = append(names, name)
		if strings.EqualFold(name, "for") {
			node, found = value, true
		}
		p = end
	}
	return node, found
}

// forwardedPair reads the pair name=value that starts at element[p]: a
// token, "=", and a token or quoted string, which must be followed
// (after spaces) by ";" or the end of the element. It returns the value
// unquoted and the index after the pair and its trailing spaces.
func forwardedPair(element string, p int) (name, value string, end int, ok bool) {
	start := p
	for p < len(element) && isTokenChar(element[p]) {
		p++
	}
	name = element[start:p]
	if name == "" || p == len(element) || element[p] != '=' {
		return "", "", 0, false
	}
	p++
	if p < len(element) && element[p] == '"' {
		if value, p, ok = quotedString(element, p); !ok {
			return "", "", 0, false
		}
	} else {
		start = p
		for p < len(element) && isValueChar(element[p]) {
			p++
		}
		value = element[start:p]
	}
	p = skipOWS(element, p)
	if value == "" || (p < len(element) && element[p] != ';') {
		return "", "", 0, false
	}
	return name, value, p, true
}

// maxForwardedPairs is the most parameters a Forwarded element may have:
// RFC 7239 defines four (by, for, host, proto).
const maxForwardedPairs = 16

// quotedString reads the quoted string that starts at s[p], a quote, and
// returns its value with backslash escapes undone and the index after its
// closing quote. It fails on an unclosed string and on control characters
// other than tab.
func quotedString(s string, p int) (value string, end int, ok bool) {
	p++
	start := p
	var buf []byte // only when the string has an escape
	for p < len(s) {
		c := s[p]
		switch {
		case c == '"':
			if buf == nil {
				return s[start:p], p + 1, true
			}
			return string(buf), p + 1, true
		case c == '\\':
			if p+1 == len(s) || isCtl(s[p+1]) {
				return "", 0, false
			}
			if buf == nil {
				buf = append(make([]byte, 0, len(s)-start), s[start:p]...)
			}
			buf = append(buf, s[p+1])
			p += 2
			continue
		case isCtl(c):
			return "", 0, false
		}
		if buf != nil {
			buf = append(buf, c)
		}
		p++
	}
	return "", 0, false
}

// isCtl reports whether c is a control character other than tab.
func isCtl(c byte) bool { return (c < ' ' && c != '\t') || c == 0x7f }

// isTokenChar reports whether c may appear in an HTTP token (RFC 9110
// tchar).
func isTokenChar(c byte) bool { return tokenChars[c] }

// isValueChar reports whether c may appear in an unquoted parameter
// value: a token character, or ':', '[' or ']', which RFC 7239 allows only
// quoted but an address with a port or in brackets needs.
func isValueChar(c byte) bool { return tokenChars[c] || c == ':' || c == '[' || c == ']' }

var tokenChars = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range []byte("!#$%&'*+-.^_`|~") {
		t[c] = true
	}
	return t
}()

// skipOWS returns the index of the first byte of s at or after p that is
// not a space or a tab.
func skipOWS(s string, p int) int {
	for p < len(s) && (s[p] == ' ' || s[p] == '\t') {
		p++
	}
	return p
}

// trimOWS trims spaces and tabs from both ends of s.
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// parseNode parses a Forwarded node that is an address: "192.0.2.60",
// "192.0.2.60:4711", "[2001:db8::1]", "[2001:db8::1]:4711", with a port of
// up to five digits or obfuscated ("_p1"); also an unbracketed IPv6
// address without a port. It drops any zone and unmaps IPv4-mapped IPv6
// addresses. "unknown" and obfuscated identifiers are not addresses.
func parseNode(node string) (netip.Addr, bool) {
	host, port, hasPort := node, "", false
	bracketed := strings.HasPrefix(node, "[")
	if bracketed {
		end := strings.IndexByte(node, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host = node[1:end]
		if rest := node[end+1:]; rest != "" {
			if rest[0] != ':' {
				return netip.Addr{}, false
			}
			port, hasPort = rest[1:], true
		}
	} else if strings.Count(node, ":") == 1 {
		i := strings.IndexByte(node, ':')
		host, port, hasPort = node[:i], node[i+1:], true
	}
	if hasPort && !validNodePort(port) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || (bracketed && !a.Is6()) {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// validNodePort reports whether port is an RFC 7239 node-port: one to five
// digits, or "_" and an obfuscated identifier.
func validNodePort(port string) bool {
	if port == "" {
		return false
	}
	if port[0] == '_' {
		if len(port) == 1 {
			return false
		}
		for i := 1; i < len(port); i++ {
			c := port[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return true
	}
	if len(port) > 5 {
		return false
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
	}
	return true
}
