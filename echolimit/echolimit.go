// Package echolimit puts redlimit in front of echo (v4) handlers.
//
//	e.Use(echolimit.New(lim, core.PerSecond(20)))                 // every route
//	g := e.Group("/api", echolimit.New(lim, core.PerSecond(100)))  // a group
//	e.POST("/login", login, echolimit.New(lim, core.PerMinute(5))) // one route
//
// A request that does not pass is answered as by every adapter: the JSON
// body {"error":"rate limit exceeded","retry_after":3}, a problem with
// redlimit.WithProblemDetails, or the deny handler of
// redlimit.WithDenyHandler; the middleware then returns nil without
// calling the handler, so echo's error handler is not involved. Policies
// keep their state under their name (redlimit.WithName); unnamed, under
// their limits ("100/m"): name one to keep its state across a change of
// rate.
//
// Keys never come from echo's c.RealIP(), which believes X-Forwarded-For
// unless an IPExtractor is set; the default key is keyfunc.IP(), the peer
// address. For keyfunc.Route, the middleware sets r.Pattern to c.Path()
// (the route template) when nothing else set it. Use it with e.Use, not
// e.Pre: before routing there is no route. Key keys requests by what an
// earlier middleware stored with c.Set:
//
//	e.Use(authenticate) // c.Set("user", id)
//	e.Use(echolimit.New(lim, core.PerSecond(10), redlimit.WithKey(echolimit.Key("user"))))
//
// A rules table's patterns are ServeMux's, not echo's ({id}, not :id);
// CheckRules reports the rules that match no route of an Echo.
package echolimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/ctxvalue"
	rulepattern "github.com/redlimit/redlimit/internal/pattern"
	"github.com/redlimit/redlimit/keyfunc"
)

// New returns an echo middleware that limits the requests it handles by
// limit, with the redlimit Options. It panics if the limit or an option is
// invalid: it runs at start-up.
func New(l *core.Limiter, limit core.Limit, opts ...redlimit.Option) echo.MiddlewareFunc {
	p, err := redlimit.NewPolicy(l, limit, opts...)
	if err != nil {
		panic(err)
	}
	return Middleware(p)
}

// Rules returns an echo middleware that applies a rules table: each request
// is limited by the rule that matches its path, if any. Errors name the bad
// rule. Patterns are net/http ServeMux patterns ("GET /users/{id}"), not
// echo's; once the routes are registered, CheckRules tells whether each
// rule matches one.
func Rules(l *core.Limiter, rules redlimit.Rules, opts ...redlimit.Option) (echo.MiddlewareFunc, error) {
	rs, err := redlimit.NewRuleSet(l, rules, opts...)
	if err != nil {
		return nil, err
	}
	return Middleware(rs), nil
}

// Middleware returns an echo middleware for a redlimit.Policy: one made by
// redlimit.NewPolicy, or a *redlimit.RuleSet.
func Middleware(p redlimit.Policy) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if r.Pattern == "" {
				r.Pattern = c.Path()
			}
			// Where Key and Tier find the echo context, and where the
			// request's Decisions are recorded: the handlers get the request
			// Serve served (with a budget's Usage too), and find them
			// (redlimit.DecisionsFrom).
			ctx := redlimit.ContextWithDecisions(r.Context())
			r = r.WithContext(context.WithValue(ctx, contextKey{}, c))
			var err error
			redlimit.Serve(p, c.Response(), r, func(_ http.ResponseWriter, served *http.Request) int {
				c.SetRequest(served)
				err = next(c)
				return status(c, err)
			})
			return err
		}
	}
}

// status is the status a handler answered with: its error's (500 for an
// error that is not an *echo.HTTPError), else what it wrote.
func status(c echo.Context, err error) int {
	if err == nil {
		return c.Response().Status
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return he.Code
	}
	return http.StatusInternalServerError
}

// contextKey is where the middleware puts the echo context in the context
// of the request it decides, for Key and Tier.
type contextKey struct{}

// Key keys requests by the value an echo middleware before this one stored
// under name with c.Set, as "<name>:<value>": Key("user") with
// c.Set("user", "alice") is "user:alice", the key keyfunc.ContextUser
// gives on another adapter, so both share a limit. The value may be a
// string, any integer type or a fmt.Stringer. A request without the value
// (or with an empty string) is an error wrapping keyfunc.ErrNoKey, so the
// policy answers it 400 and logs it, unless keyfunc.First falls back; a
// value of another type is an error too. Key finds the echo context only
// in requests decided by this package's middleware; elsewhere it is an
// error wrapping keyfunc.ErrNoKey. The middleware puts the echo context
// in the context of every request it decides (two allocations a request),
// whether or not Key is called: Key may be called at any time. The Func is
// safe for concurrent use.
func Key(name string) keyfunc.Func {
	return func(r *http.Request) (string, error) {
		c, ok := r.Context().Value(contextKey{}).(echo.Context)
		if !ok {
			return "", fmt.Errorf("%w: echolimit.Key(%q) reads the echo context, and this request was not decided by an echolimit middleware", keyfunc.ErrNoKey, name)
		}
		return ctxvalue.Key("echo", name, c.Get(name))
	}
}

// Tier tells a rules table's tiers (redlimit.WithTier) and a policy's
// limit sets (redlimit.WithLimitSets) by the value an echo middleware
// before this one stored under name with c.Set, a string or a
// fmt.Stringer: with c.Set("plan", "pro"), rules "* tier=pro" and the set
// "pro" apply. A request without the value is of the default (the rules
// without a tier, the policy's own limits); a value of another type is an
// error, logged, and the request decided by the default. Like Key, it finds the echo context only
// in requests decided by this package's middleware. The function is safe for
// concurrent use.
//
//	echolimit.Rules(lim, rules, redlimit.WithTier(echolimit.Tier("plan")))
//	echolimit.New(lim, core.PerSecond(10), redlimit.WithLimitSets(plans, echolimit.Tier("plan")))
func Tier(name string) func(redlimit.Request) (string, error) {
	return func(q redlimit.Request) (string, error) {
		c, ok := q.Context.Value(contextKey{}).(echo.Context)
		if !ok {
			return "", fmt.Errorf("echolimit.Tier(%q) reads the echo context, and this request was not decided by an echolimit middleware", name)
		}
		return ctxvalue.Tier("echo", name, c.Get(name))
	}
}

// CheckRules reports, in one error wrapping redlimit.ErrInvalidRules, the
// rules of a table that match no route of e (none of e.Routes() could
// receive a request the rule matches), and a pattern no request can match.
// It returns nil when every rule can apply. Call it once the routes are
// registered, at start-up, and before a RuleSet.Update of an Echo's rules.
// The catch-all "*" applies to every request and is not checked; a rule's
// host is not looked at (echo routes on it only with e.Host, whose routes
// are not e's). A RouteNotFound route matches rules of every method, and
// the check errs on the side of a match: a parameter after a prefix
// ("/files/x_:name") is taken to match any segment. It does no I/O.
func CheckRules(e *echo.Echo, rules redlimit.Rules) error {
	var routes []rulepattern.Route
	for _, r := range e.Routes() {
		method := r.Method
		if method == echo.RouteNotFound {
			method = ""
		}
		routes = append(routes, rulepattern.Route{Method: method, Path: r.Path})
	}
	unrouted, err := rulepattern.Unrouted(rules, routes)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", redlimit.ErrInvalidRules, err)
	case len(unrouted) > 0:
		return fmt.Errorf("%w: %s: no route of the echo server matches%s", redlimit.ErrInvalidRules, rulepattern.Quote(unrouted), rulepattern.Hint(unrouted))
	}
	return nil
}
