// Package nethttp puts redlimit in front of net/http handlers.
//
//	mux.Handle("/api/", nethttp.New(lim, core.PerMinute(100))(api))       // a subtree
//	mux.Handle("POST /login", nethttp.New(lim, core.PerMinute(5))(login)) // one route
//	handler := nethttp.New(lim, core.PerSecond(50))(mux)                  // everything
//
// Policies keep their state under their name (redlimit.WithName); unnamed,
// under their limits ("100/m"): name one to keep its state across a change
// of rate. Wrap handlers registered on a ServeMux, rather than the mux
// itself, when keys use the route (keyfunc.Route): the mux sets r.Pattern
// before it calls the handler it matched.
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
	p, err := redlimit.NewPolicy(l, limit, opts...)
	if err != nil {
		panic(err)
	}
	return Middleware(p)
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

// Middleware returns middleware for a redlimit.Policy: one made by
// redlimit.NewPolicy, or a *redlimit.RuleSet.
func Middleware(p redlimit.Policy) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			redlimit.Serve(p, w, r, func(w http.ResponseWriter, r *http.Request) int {
				next.ServeHTTP(w, r)
				return 0 // net/http does not say what the handler wrote
			})
		})
	}
}
