// Package pattern reads the patterns of redlimit's rules tables: it refuses
// the ones no request can match (a method in lower case or unknown, another
// router's parameter syntax, a path no router produces), writes the others
// as net/http ServeMux patterns, and tells whether one can match a route of
// gin or echo, for their adapters' start-up checks.
package pattern

import (
	"fmt"
	"slices"
	"strings"
)

// CatchAll is the pattern of the rule whose limits apply to every request.
const CatchAll = "*"

// Methods are the request methods a pattern may name: RFC 9110's and
// WebDAV's (RFC 4918). Another is surely a typo, and a rule for it would
// never apply.
var Methods = []string{
	"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE",
	"PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK",
}

// Pattern is a rules table's pattern, checked.
type Pattern struct {
	Method string // "" for every method
	Host   string // "" for every host; else as Host writes it: lower case, no trailing dot
	Mux    string // the pattern as ServeMux reads it: a trailing "*" is "{rest...}"
	// Name is the pattern in one spelling: its method, one space, its
	// host as Host writes it and its path as written. Patterns that match
	// the same requests alike ("API.example.com./x", "api.example.com/x")
	// have one Name, which is what a rule's state is kept under.
	Name string
	segs []segment
}

// segment is one '/'-separated part of a path, as a pattern or a route
// matches it.
type segment struct {
	kind segmentKind
	text string // a literal's
}

type segmentKind int

const (
	literal segmentKind = iota // exactly text ("" after a trailing slash)
	single                     // any one non-empty segment: {id}, gin's and echo's :id
	rest                       // one or more segments, the last may be empty: {rest...}, a trailing "/", gin's *name
)

// Parse checks a pattern, "[METHOD ][HOST]/PATH", with ServeMux's {name},
// {name...} and {$} wildcards and a trailing "*" for "{rest...}". Its
// errors say why no request could match the pattern; ServeMux's own checks
// come after (a {wildcard} that is malformed, patterns that conflict).
// The catch-all "*" is not a pattern: callers handle it first.
func Parse(p string) (Pattern, error) {
	var pat Pattern
	s := strings.TrimSpace(p)
	if s != p && s != "" {
		return Pattern{}, fmt.Errorf("white space around the pattern: a rule is named by its pattern, so it would keep its state apart from %q's; write %q", s, s)
	}
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		pat.Method, s = s[:i], strings.TrimLeft(s[i:], " \t")
		if err := checkMethod(pat.Method); err != nil {
			return Pattern{}, err
		}
	}
	slash := strings.IndexByte(s, '/')
	switch {
	case s == "":
		return Pattern{}, fmt.Errorf("no path: a pattern is \"[METHOD ][HOST]/PATH\", as in \"GET /users/{id}\"")
	case slash < 0:
		return Pattern{}, fmt.Errorf("no path: %q does not start with '/'", s)
	case slash > 0:
		host := s[:slash]
		if !hostLike(host) {
			return Pattern{}, fmt.Errorf("the path %q does not start with '/' (and %q is not a host name, as in \"api.example.com/users\")", s, host)
		}
		pat.Host = Host(host)
		if name, _ := splitPort(host); name != host {
			return Pattern{}, fmt.Errorf("host %q has a port: a request's host is matched without its port, so write %q for every port", host, pat.Host)
		}
	}
	path := s[slash:]
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		return Pattern{}, fmt.Errorf("%q: a request's path never holds %q; a pattern has no query or fragment", path, path[i])
	}
	mux := path
	if i := strings.IndexByte(path, '*'); i >= 0 {
		switch {
		case i == len(path)-1 && strings.HasSuffix(path, "/*"):
			mux = path[:i] + "{rest...}"
		case i+1 < len(path) && i > 0 && path[i-1] == '/' && isNameByte(path[i+1]):
			name, _, _ := strings.Cut(path[i+1:], "/")
			return Pattern{}, fmt.Errorf("'*' may only end a pattern, as in \"GET /api/*\": %q is gin's catch-all, written %q here", path[i:i+1+len(name)], "{"+name+"...}")
		default:
			return Pattern{}, fmt.Errorf("'*' may only end a pattern, as in \"GET /api/*\"")
		}
	}
	segs, err := pathSegments(mux)
	if err != nil {
		return Pattern{}, err
	}
	pat.segs = segs
	pat.Mux, pat.Name = pat.Host+mux, pat.Host+path
	if pat.Method != "" {
		pat.Mux, pat.Name = pat.Method+" "+pat.Mux, pat.Method+" "+pat.Name
	}
	return pat, nil
}

// Host returns a request's host (its Host header, or a pattern's host) as
// rules match it, the way browsers and DNS tell hosts apart: without a
// port, in lower case, without the trailing dot of a fully qualified name.
// So "API.Example.com.:8443" is "api.example.com", and "[::1]:80" is
// "[::1]". It returns h itself when it is already so written.
func Host(h string) string {
	h, _ = splitPort(h)
	h = strings.TrimSuffix(h, ".")
	for i := 0; i < len(h); i++ {
		if 'A' <= h[i] && h[i] <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}

// splitPort splits h into its host name and its port ("" when it has
// none), as a Host header writes them: "example.com:80", "[::1]:80".
func splitPort(h string) (name, port string) {
	if strings.HasPrefix(h, "[") { // an IPv6 literal
		if i := strings.IndexByte(h, ']'); i > 0 && strings.HasPrefix(h[i+1:], ":") {
			return h[:i+1], h[i+2:]
		}
		return h, ""
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.IndexByte(h, ':') == i {
		return h[:i], h[i+1:]
	}
	return h, ""
}

// checkMethod refuses a method no request has.
func checkMethod(m string) error {
	if slices.Contains(Methods, m) {
		return nil
	}
	if up := strings.ToUpper(m); slices.Contains(Methods, up) {
		return fmt.Errorf("method %q: methods are case-sensitive and requests send %q; write it so", m, up)
	}
	return fmt.Errorf("unknown method %q: one of %s", m, strings.Join(Methods, ", "))
}

// hostLike reports whether a pattern's host part looks like one: a name
// with a dot, localhost, or with a port. Anything else is a path whose '/'
// was left out ("reports/{id}").
func hostLike(h string) bool {
	return strings.ContainsAny(h, ".:[") || h == "localhost"
}

// pathSegments splits a ServeMux path pattern into segments, refusing
// what a cleaned request path never holds and other routers' syntax.
func pathSegments(path string) ([]segment, error) {
	parts := strings.Split(path[1:], "/")
	segs := make([]segment, 0, len(parts))
	for i, part := range parts {
		last := i == len(parts)-1
		switch {
		case part == "" && last: // a trailing slash: the subtree
			segs = append(segs, segment{kind: rest})
		case part == "":
			return nil, fmt.Errorf("an empty segment (\"//\"): requests' paths are cleaned, so it never matches")
		case part == "." || part == "..":
			return nil, fmt.Errorf("a %q segment: requests' paths are cleaned, so it never matches", part)
		case part[0] == ':' && len(part) > 1:
			return nil, fmt.Errorf("%q is gin's and echo's parameter syntax; rules use ServeMux's, %q", part, "{"+part[1:]+"}")
		case part == "{$}" && last:
			segs = append(segs, segment{kind: literal})
		case strings.HasPrefix(part, "{") && strings.HasSuffix(part, "...}"):
			segs = append(segs, segment{kind: rest}) // ServeMux refuses one that is not last
		case strings.HasPrefix(part, "{") && strings.HasSuffix(part, "}"):
			name := part[1 : len(part)-1]
			if i := strings.IndexAny(name, ":="); i >= 0 {
				return nil, fmt.Errorf("%q: a wildcard with a regular expression (chi's, gorilla/mux's) is not ServeMux's; write %q", part, "{"+name[:i]+"}")
			}
			segs = append(segs, segment{kind: single})
		default:
			segs = append(segs, segment{kind: literal, text: part})
		}
	}
	return segs, nil
}

func isNameByte(b byte) bool {
	return b == '_' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
}

// MatchesRoute reports whether some request to a route of gin or echo
// (httprouter syntax: :name parameters, a *name or * catch-all at the end)
// registered for method ("" for every method) could match p. It errs on
// the side of yes: a segment with a parameter after a prefix
// ("/files/x_:name") is taken as any segment. A pattern's host is not
// looked at: neither router routes on it.
func (p Pattern) MatchesRoute(method, route string) bool {
	switch {
	case p.Method == "" || method == "" || p.Method == method:
	case p.Method == "GET" && method == "HEAD": // ServeMux's GET patterns match HEAD requests
	default:
		return false
	}
	return overlap(p.segs, routeSegments(route))
}

// routeSegments splits a gin or echo route into segments.
func routeSegments(route string) []segment {
	route = strings.TrimPrefix(route, "/")
	parts := strings.Split(route, "/")
	segs := make([]segment, 0, len(parts))
	for _, part := range parts {
		switch {
		case strings.ContainsRune(part, '*'): // a catch-all: anything from here
			return append(segs, segment{kind: rest})
		case strings.ContainsRune(part, ':'): // a parameter, maybe after a prefix ("x_:name"): taken as any segment
			segs = append(segs, segment{kind: single})
		default:
			segs = append(segs, segment{kind: literal, text: part})
		}
	}
	return segs
}

// overlap reports whether some path matches both a and b.
func overlap(a, b []segment) bool {
	for len(a) > 0 && len(b) > 0 {
		if a[0].kind == rest || b[0].kind == rest {
			return true
		}
		x, y := a[0], b[0]
		if x.kind == single {
			x, y = y, x
		}
		switch {
		case x.kind == literal && y.kind == literal && x.text != y.text:
			return false
		case x.kind == literal && y.kind == single && x.text == "": // a wildcard's segment is never empty
			return false
		}
		a, b = a[1:], b[1:]
	}
	return len(a) == 0 && len(b) == 0
}

// Route is a route of a router: its method ("" for every method) and its
// path in the router's syntax.
type Route struct {
	Method, Path string
}

// Unrouted returns the patterns of rules (the catch-all aside, in every
// tier; a tier's rule is checked as its pattern) that match
// none of routes, sorted, or the error of the first pattern, in sorted
// order, that no request can match.
func Unrouted(rules map[string]string, routes []Route) ([]string, error) {
	patterns := make([]string, 0, len(rules))
	for p := range rules {
		if p != CatchAll {
			patterns = append(patterns, p)
		}
	}
	slices.Sort(patterns)
	var unrouted []string
	for _, p := range patterns {
		bare, _, err := SplitTier(p) // a tier's rule is checked as its pattern
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", p, err)
		}
		if bare == CatchAll {
			continue
		}
		pat, err := Parse(bare)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", p, err)
		}
		if !slices.ContainsFunc(routes, func(r Route) bool { return pat.MatchesRoute(r.Method, r.Path) }) {
			unrouted = append(unrouted, p)
		}
	}
	return unrouted, nil
}

// Hint returns what to add to the report of unrouted patterns when one of
// them has a ':' in its path, perhaps gin's and echo's parameter syntax
// after a prefix ("/files/x_:name"), which a rule's path matches as
// written: " (patterns are ServeMux's: {id}, not :id)". Otherwise there is
// no such hint to give, and it returns "".
func Hint(unrouted []string) string {
	for _, p := range unrouted {
		p, _, _ = SplitTier(p)
		if pat, err := Parse(p); err == nil && strings.ContainsRune(pat.Mux[strings.IndexByte(pat.Mux, '/'):], ':') {
			return " (patterns are ServeMux's: {id}, not :id)"
		}
	}
	return ""
}

// Quote writes patterns for an error message: `rule "a"`, `rules "a", "b"`.
func Quote(patterns []string) string {
	q := make([]string, len(patterns))
	for i, p := range patterns {
		q[i] = fmt.Sprintf("%q", p)
	}
	if len(q) == 1 {
		return "rule " + q[0]
	}
	return "rules " + strings.Join(q, ", ")
}

// tierSep starts the tier of a rules table's key: "* tier=pro",
// "POST /v1/batch tier=pro".
const tierSep = " tier="

// SplitTier splits a rules table's key into its pattern and its tier, ""
// for a rule of every tier. A tier is 1 to 64 bytes of letters, digits,
// '_', '-' and '.'; a key with " tier=" and no such name is an error.
func SplitTier(key string) (pattern, tier string, err error) {
	i := strings.LastIndex(key, tierSep)
	if i < 0 {
		return key, "", nil
	}
	pattern, tier = key[:i], key[i+len(tierSep):]
	if tier == "" || len(tier) > 64 {
		return "", "", fmt.Errorf("tier %q: want 1 to 64 bytes of letters, digits, '_', '-' and '.' after \"tier=\"", tier)
	}
	for i := 0; i < len(tier); i++ {
		if b := tier[i]; !isNameByte(b) && b != '-' && b != '.' {
			return "", "", fmt.Errorf("tier %q: byte %q: want letters, digits, '_', '-' and '.' after \"tier=\"", tier, b)
		}
	}
	return pattern, tier, nil
}
