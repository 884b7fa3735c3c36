// Package nethttp puts redlimit in front of net/http handlers.
//
//	mux.Handle("/api/", nethttp.New(lim, core.PerMinute(100))(api))           // a subtree
//	mux.Handle("POST /login", nethttp.New(lim, core.PerMinute(5))(login))     // one route
//	handler := nethttp.New(lim, core.PerSecond(50))(mux)                      // everything
//
// Wrap handlers registered on a ServeMux, rather than the mux itself, when
// keys use the route (keyfunc.Route): the mux sets r.Pattern before it calls
// the handler it matched.
package nethttp

import (
	"net/http"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// New returns middleware that limits the requests it wraps by limit, with
// the redlimit Options. A request that does not pass gets 429 (or 503, 400:
// see redlimit.Decision) and is not handed to the next handler. New panics
// if the limit or an option is invalid: it runs at start-up.
func New(l *core.Limiter, limit core.Limit, opts ...redlimit.Option) func(http.Handler) http.Handler {
	return Middleware(redlimit.MustPolicy(l, limit, opts...))
}

// Rules returns middleware that applies a rules table: each request is
// limited by the rule that matches it, if any. Errors name the bad rule.
func Rules(l *core.Limiter, rules redlimit.Rules, opts ...redlimit.Option) (func(http.Handler) http.Handler, error) {
	rs, err := redlimit.NewRuleSet(l, rules, opts...)
	if err != nil {
		return nil, err
	}
	return Middleware(rs), nil
}

// Middleware returns middleware for a Policy or a RuleSet built by hand.
func Middleware(m redlimit.Matcher) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := m.Match(r)
			if p == nil {
				next.ServeHTTP(w, r)
				return
			}
			if d := p.Decide(w, r); !d.Allowed() {
				p.Deny(w, r, d)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
