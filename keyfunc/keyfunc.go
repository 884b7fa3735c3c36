// Package keyfunc extracts the identity a rate limit counts requests by:
// the client's IP address, a header, a user ID, the route, or a
// combination. It uses the standard library only.
//
// Every Func returns a key prefixed by its kind ("ip:", "header:", "user:",
// "route:"; IP gives a peer on a Unix socket the key "unix:"), so keys of
// different kinds never collide. A request without the identity a Func
// looks for is an error wrapping ErrNoKey; the HTTP middleware answers it
// with 400 Bad Request rather than letting it pass unlimited. Use First to
// fall back, for example from a user ID to the IP.
package keyfunc

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Func returns the rate-limit key of a request. It must be safe for
// concurrent use; every Func in this package is.
type Func func(r *http.Request) (string, error)

// ErrNoKey is wrapped by the errors of Funcs that find no identity in a
// request: a missing header, no user, an unparsable client address.
var ErrNoKey = errors.New("keyfunc: no key in request")

// Header keys requests by the value of the named header, as
// "header:<Name>:<value>". A missing or empty header is an ErrNoKey error.
//
// Only use it for headers the client cannot choose freely to escape its
// limit, such as an API key that is also checked, or a header a trusted
// proxy sets.
func Header(name string) Func {
	name = http.CanonicalHeaderKey(name)
	prefix := "header:" + name + ":"
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", fmt.Errorf("%w: header %s is missing", ErrNoKey, name)
		}
		return prefix + v, nil
	}
}

// User keys requests by the user ID that id returns, as "user:<id>"; id
// reports false (or an empty ID) for anonymous requests, which are then an
// ErrNoKey error. Typically id reads what authentication middleware put in
// the request's context.
func User(id func(r *http.Request) (string, bool)) Func {
	return func(r *http.Request) (string, error) {
		v, ok := id(r)
		if !ok || v == "" {
			return "", fmt.Errorf("%w: no user", ErrNoKey)
		}
		return "user:" + v, nil
	}
}

// ContextUser is User reading a string stored in the request's context
// under ctxKey, as authentication middleware commonly does with
// context.WithValue.
func ContextUser(ctxKey any) Func {
	return User(func(r *http.Request) (string, bool) {
		v, ok := r.Context().Value(ctxKey).(string)
		return v, ok
	})
}

// Route keys requests by method and route template, as
// "route:GET /users/{id}": never by the raw path, so /users/1 and /users/2
// share one key and a client cannot mint new keys by varying the path.
//
// The template is r.Pattern: net/http's ServeMux sets it, the ginlimit
// and echolimit adapters set it from gin's c.FullPath() and echo's
// c.Path(), and chilimit from chi's routes, wherever it is mounted.
// A request no route matched has no template; all such requests share the
// key "route:<method> (unmatched)".
func Route() Func {
	return func(r *http.Request) (string, error) {
		pattern := r.Pattern
		if pattern == "" {
			pattern = "(unmatched)"
		}
		if strings.HasPrefix(pattern, r.Method+" ") { // ServeMux keeps the method
			return "route:" + pattern, nil
		}
		return "route:" + r.Method + " " + pattern, nil
	}
}

// Join keys requests by several Funcs at once, for example the route and the
// IP: "route:POST /login|ip:203.0.113.7". It fails if any part fails. A '|'
// or '\' inside a part is escaped, so distinct parts never join to the same
// key.
func Join(funcs ...Func) Func {
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		for i, f := range funcs {
			k, err := f(r)
			if err != nil {
				return "", err
			}
			if i > 0 {
				b.WriteByte('|')
			}
			if strings.ContainsAny(k, `|\`) {
				k = joinEscaper.Replace(k)
			}
			b.WriteString(k)
		}
		return b.String(), nil
	}
}

var joinEscaper = strings.NewReplacer(`\`, `\\`, `|`, `\|`)

// First returns the key of the first Func that finds one, falling back in
// order: First(ContextUser(k), IP()) limits signed-in users by ID and
// everyone else by address. If all fail, it returns the last error.
func First(funcs ...Func) Func {
	return func(r *http.Request) (string, error) {
		err := fmt.Errorf("%w: keyfunc.First has no Funcs", ErrNoKey)
		for _, f := range funcs {
			var k string
			if k, err = f(r); err == nil {
				return k, nil
			}
		}
		return "", err
	}
}
