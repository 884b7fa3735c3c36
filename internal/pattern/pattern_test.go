package pattern

import (
	"slices"
	"strings"
	"testing"
)

// TestParseMux: a valid pattern is written as ServeMux reads it, and
// named in one spelling: its host as Host writes it, one space after the
// method, the path as written.
func TestParseMux(t *testing.T) {
	t.Parallel()
	for p, want := range map[string][2]string{
		"GET /api/*":              {"GET /api/{rest...}", "GET /api/*"},
		"/":                       {"/", "/"},
		"POST\t /login":           {"POST /login", "POST /login"},
		"api.example.com/x/*":     {"api.example.com/x/{rest...}", "api.example.com/x/*"},
		"API.Example.COM./x":      {"api.example.com/x", "api.example.com/x"},
		"GET [::1]/x":             {"GET [::1]/x", "GET [::1]/x"},
		"GET /users/{id}/{$}":     {"GET /users/{id}/{$}", "GET /users/{id}/{$}"},
		"/v1/things:batchGet":     {"/v1/things:batchGet", "/v1/things:batchGet"},
		"PROPFIND /dav/{path...}": {"PROPFIND /dav/{path...}", "PROPFIND /dav/{path...}"},
		"GET localhost/health":    {"GET localhost/health", "GET localhost/health"},
	} {
		got, err := Parse(p)
		if err != nil || got.Mux != want[0] || got.Name != want[1] {
			t.Errorf("Parse(%q) = %q named %q, %v; want %q named %q", p, got.Mux, got.Name, err, want[0], want[1])
		}
	}
}

// TestParseRefused: white space around a pattern (a rule apart from the
// same pattern without it) and a host with a port (which no request's
// host has once its port is dropped) are refused, saying how to write it.
func TestParseRefused(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]string{
		" POST /login":          `white space around the pattern: a rule is named by its pattern, so it would keep its state apart from "POST /login"'s; write "POST /login"`,
		"POST /login ":          `white space around the pattern`,
		"\tGET /x\n":            `write "GET /x"`,
		"localhost:8080/health": `host "localhost:8080" has a port: a request's host is matched without its port, so write "localhost" for every port`,
		"GET [::1]:80/x":        `host "[::1]:80" has a port`,
		"API.example.com:/x":    `write "api.example.com" for every port`,
	} {
		if _, err := Parse(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v; want an error saying %q", p, err, want)
		}
	}
}

// TestHost: a request's host as rules match it, as browsers and DNS tell
// hosts apart.
func TestHost(t *testing.T) {
	t.Parallel()
	for h, want := range map[string]string{
		"":                     "",
		"api.example.com":      "api.example.com",
		"API.EXAMPLE.COM":      "api.example.com",
		"api.example.com.":     "api.example.com",
		"api.example.com:8080": "api.example.com",
		"Api.Example.Com.:443": "api.example.com",
		"localhost":            "localhost",
		"127.0.0.1:80":         "127.0.0.1",
		"[::1]":                "[::1]",
		"[::1]:8080":           "[::1]",
		"[2001:DB8::1]:443":    "[2001:db8::1]",
		"api.example.com.evil": "api.example.com.evil",
		"api.example.com..":    "api.example.com.",
	} {
		if got := Host(h); got != want {
			t.Errorf("Host(%q) = %q, want %q", h, got, want)
		}
	}
}

// TestMatchesRoute: a pattern matches a route when some request path
// matches both, with ServeMux's rules for the pattern (a trailing slash is
// a subtree, {$} the end, GET takes HEAD) and gin's and echo's for the
// route (:name one segment, *name or * the rest).
func TestMatchesRoute(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		pattern, method, route string
		want                   bool
	}{
		{"GET /users/{id}", "GET", "/users/:id", true},
		{"GET /users/{id}", "POST", "/users/:id", false},
		{"GET /users/{id}", "HEAD", "/users/:id", true},
		{"HEAD /users/{id}", "GET", "/users/:id", false},
		{"/users/{id}", "DELETE", "/users/:id", true},
		{"/users/{id}", "", "/users/:id", true}, // a route of every method
		{"GET /users/alice", "GET", "/users/:id", true},
		{"GET /users/{id}", "GET", "/users/alice", true},
		{"GET /users/{id}", "GET", "/users", false},
		{"GET /users/{id}", "GET", "/users/:id/posts", false},
		{"GET /users/{id}/posts", "GET", "/users/:id", false},
		{"GET /users/", "GET", "/users/:id/posts/:post", true},
		{"GET /users/", "GET", "/users", false},
		{"GET /users/", "GET", "/users/", true},
		{"GET /users/{$}", "GET", "/users/", true},
		{"GET /users/{$}", "GET", "/users/:id", false},
		{"GET /users/*", "GET", "/users/:id", true},
		{"GET /users/{rest...}", "GET", "/users/:id", true},
		{"/", "PUT", "/anything/at/all", true},
		{"/{$}", "GET", "/", true},
		{"/{$}", "GET", "/x", false},
		{"GET /static/app.js", "GET", "/static/*filepath", true},
		{"GET /static/app.js", "GET", "/static/*", true},
		{"GET /static", "GET", "/static/*filepath", false},
		{"GET /files/a/b", "GET", "/files/x_:name", false},
		{"GET /files/x_1", "GET", "/files/x_:name", true},
		{"GET /a/b", "GET", "/a/c", false},
		{"example.com/a", "GET", "/a", true},
	} {
		p, err := Parse(tt.pattern)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.pattern, err)
		}
		if got := p.MatchesRoute(tt.method, tt.route); got != tt.want {
			t.Errorf("%q matches %s %s: %v, want %v", tt.pattern, tt.method, tt.route, got, tt.want)
		}
	}
}

// TestUnrouted: the patterns no route matches, sorted, the catch-all
// aside; a pattern that cannot match is an error naming it.
func TestUnrouted(t *testing.T) {
	t.Parallel()
	routes := []Route{{"GET", "/users/:id"}, {"POST", "/login"}}
	got, err := Unrouted(map[string]string{"*": "", "GET /users/{id}": "", "POST /logout": "", "GET /login": ""}, routes)
	if want := []string{"GET /login", "POST /logout"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("Unrouted = %q, %v; want %q", got, err, want)
	}
	if _, err := Unrouted(map[string]string{"GET /users/:id": ""}, routes); err == nil || err.Error() != `rule "GET /users/:id": ":id" is gin's and echo's parameter syntax; rules use ServeMux's, "{id}"` {
		t.Errorf("Unrouted of a gin pattern: %v", err)
	}
	if q := Quote([]string{"a"}); q != `rule "a"` {
		t.Errorf("Quote of one: %s", q)
	}
	if q := Quote([]string{"a", "b"}); q != `rules "a", "b"` {
		t.Errorf("Quote of two: %s", q)
	}
}
