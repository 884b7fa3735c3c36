// Package chilimit puts redlimit in front of chi (v5) routers.
//
//	r.Use(chilimit.New(lim, core.PerSecond(20)))                       // the whole router
//	r.Route("/api", func(r chi.Router) {
//		r.Use(chilimit.New(lim, core.PerSecond(100)))                  // a subrouter
//		r.Get("/orders", orders)
//	})
//	r.With(chilimit.New(lim, core.PerMinute(5))).Post("/login", login) // one route
//
// chi's middleware is net/http's, so the middleware is nethttp's with one
// addition, the route. A request that does not pass is answered as by
// every adapter (the JSON body {"error":"rate limit exceeded",
// "retry_after":3}, a problem with redlimit.WithProblemDetails, or the
// deny handler of redlimit.WithDenyHandler) and not handed to the next
// handler. Policies keep their state under their name
// (redlimit.WithName); unnamed, under their limits ("100/m"): name one to
// keep its state across a change of rate.
//
// The route: chi sets r.Pattern (and r.PathValue) only once it has routed
// a request, after the middleware of r.Use has run. So the middleware
// looks the request up in the router itself, with chi's own Find, and sets
// r.Pattern to the route template chi will set ("/users/{id}",
// "/api/orders/{id}" in a mounted subrouter) and r.PathValue to the
// route's parameters, wherever it is mounted: on the top router (r.Use),
// on a subrouter (r.Route, r.Mount), or on a route (r.With, r.Group),
// where chi has routed the request already. So keyfunc.Route and key
// functions that read r.PathValue work in all of these. A request no
// route matches keeps r.Pattern as it was ("" on the top router: keyed
// "route:GET (unmatched)").
//
// chi has no per-request store of its own: an authentication middleware
// puts the user and the plan in the request's context
// (context.WithValue), keyfunc.ContextUser keys by the user, and Tier
// reads the plan, for a rules table's tiers (redlimit.WithTier) and a
// policy's limit sets (redlimit.WithLimitSets).
//
// A rules table's patterns are ServeMux's, as chi's are ("{id}"), without
// chi's regular expressions ("{id:[0-9]+}"); CheckRules reports the rules
// that match no route of a router.
package chilimit

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/ctxvalue"
	rulepattern "github.com/redlimit/redlimit/internal/pattern"
)

// New returns chi middleware that limits the requests it handles by limit,
// with the redlimit Options. It panics if the limit or an option is
// invalid: it runs at start-up.
func New(l *core.Limiter, limit core.Limit, opts ...redlimit.Option) func(http.Handler) http.Handler {
	p, err := redlimit.NewPolicy(l, limit, opts...)
	if err != nil {
		panic(err)
	}
	return Middleware(p)
}

// Rules returns chi middleware that applies a rules table: each request is
// limited by the rule that matches its path, if any. Errors name the bad
// rule. Patterns are net/http ServeMux patterns ("GET /users/{id}"); once
// the routes are registered, CheckRules tells whether each rule matches
// one.
func Rules(l *core.Limiter, rules redlimit.Rules, opts ...redlimit.Option) (func(http.Handler) http.Handler, error) {
	rs, err := redlimit.NewRuleSet(l, rules, opts...)
	if err != nil {
		return nil, err
	}
	return Middleware(rs), nil
}

// Middleware returns chi middleware for a redlimit.Policy: one made by
// redlimit.NewPolicy, or a *redlimit.RuleSet. Outside a chi router it is
// nethttp's middleware: it leaves r.Pattern as it finds it. The middleware
// is safe for concurrent use.
func Middleware(p redlimit.Policy) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			route(r)
			redlimit.Serve(p, w, r, func(w http.ResponseWriter, r *http.Request) int {
				next.ServeHTTP(w, r)
				return 0 // net/http does not say what the handler wrote
			})
		})
	}
}

// route sets r.Pattern and r's path values to those chi sets when it
// routes r to its handler, when chi has not done so yet: before the top
// router routes (its r.Use), and in a subrouter's middleware, where
// r.Pattern is only the mount's ("/api/*"). A request no route matches is
// left as it is.
func route(r *http.Request) {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil || rctx.Routes == nil {
		return // not in a chi router
	}
	var path string
	switch n := len(rctx.RoutePatterns); {
	case n == 0: // the top router's middleware, before routing: it will route rctx.RoutePath if set
		path = rctx.RoutePath
	case strings.HasSuffix(rctx.RoutePatterns[n-1], "*"): // a subrouter's middleware (or a route ending in *)
	default:
		return // routed: a route's middleware (r.With, r.Group), where chi has set r.Pattern
	}
	if path == "" {
		path = r.URL.RawPath
		if path == "" {
			path = r.URL.Path
		}
		if path == "" {
			path = "/"
		}
	}
	method := rctx.RouteMethod
	if method == "" {
		method = r.Method
	}
	found := chi.NewRouteContext()
	if rctx.Routes.Find(found, method, path) != "" { // rctx.Routes is the top router
		r.Pattern = found.RoutePattern()
		for i, key := range found.URLParams.Keys {
			r.SetPathValue(key, found.URLParams.Values[i])
		}
	}
}

// Tier tells a request's tier (redlimit.WithTier) or limit set
// (redlimit.WithLimitSets) by the value a middleware before this one put
// in the request's context under ctxKey (context.WithValue), a string or a
// fmt.Stringer: with the plan "pro" there, rules "* tier=pro" and the set
// "pro" apply. A request without the value is of the default (the rules
// without a tier, the policy's own limits); a value of another type is an
// error, logged, and the request decided by the default. It reads the
// request's context, so it works with nethttp's middleware too. The
// function is safe for concurrent use.
//
//	chilimit.New(lim, core.PerSecond(10), redlimit.WithLimitSets(plans, chilimit.Tier(planKey{})))
func Tier(ctxKey any) func(redlimit.Request) (string, error) {
	name := fmt.Sprint(ctxKey)
	return func(q redlimit.Request) (string, error) {
		if q.Context == nil {
			return "", nil
		}
		return ctxvalue.Tier("chi", name, q.Context.Value(ctxKey))
	}
}

// CheckRules reports, in one error wrapping redlimit.ErrInvalidRules, the
// rules of a table that match no route of router (none of the routes
// chi.Walk finds, mounted subrouters' included, could receive a request
// the rule matches), and a pattern no request can match. It returns nil
// when every rule can apply. Call it once the routes are registered, at
// start-up, and before a RuleSet.Update of a router's rules. The
// catch-all "*" applies to every request and is not checked; a rule's host
// is not looked at (chi does not route on it). It errs on the side of a
// match: a parameter with a regular expression or beside other text
// ("{id:[0-9]+}", "/files/{name}.{ext}") is taken to match any segment,
// and a route ending in '/' to match without it (chi routes "/api" to the
// "/" route of a subrouter mounted on "/api"). It does no I/O.
func CheckRules(router chi.Routes, rules redlimit.Rules) error {
	var routes []rulepattern.Route
	err := chi.Walk(router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		path := httprouterPath(route)
		routes = append(routes, rulepattern.Route{Method: method, Path: path})
		if len(path) > 1 && strings.HasSuffix(path, "/") {
			routes = append(routes, rulepattern.Route{Method: method, Path: strings.TrimSuffix(path, "/")})
		}
		return nil
	})
	if err != nil { // not reached: the walk function returns no error
		return err
	}
	unrouted, err := rulepattern.Unrouted(rules, routes)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", redlimit.ErrInvalidRules, err)
	case len(unrouted) > 0:
		return fmt.Errorf("%w: %s: no route of the chi router matches%s", redlimit.ErrInvalidRules, rulepattern.Quote(unrouted), rulepattern.Hint(unrouted))
	}
	return nil
}

// httprouterPath writes a chi route in the syntax the route check reads,
// gin's and echo's: each {parameter}, with its regular expression and any
// braces inside it, becomes ":p"; a trailing "*" stays.
func httprouterPath(route string) string {
	var b strings.Builder
	depth := 0
	for i := 0; i < len(route); i++ {
		switch c := route[i]; {
		case c == '{':
			if depth == 0 {
				b.WriteString(":p")
			}
			depth++
		case c == '}' && depth > 0:
			depth--
		case depth == 0:
			b.WriteByte(c)
		}
	}
	return b.String()
}
