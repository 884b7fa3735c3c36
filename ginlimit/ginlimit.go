// Package ginlimit puts redlimit in front of gin handlers.
//
//	r.Use(ginlimit.New(lim, core.PerSecond(20)))                 // the whole router
//	api.Use(ginlimit.New(lim, core.PerSecond(100)))              // a group
//	r.POST("/login", ginlimit.New(lim, core.PerMinute(5)), login) // one route
//
// A request that does not pass is answered as by every adapter (the JSON
// body {"error":"rate limit exceeded","retry_after":3}, a problem with
// redlimit.WithProblemDetails, or the deny handler of
// redlimit.WithDenyHandler) and the chain is aborted with c.Abort.
// Policies keep their state under their name (redlimit.WithName); unnamed,
// under their limits ("100/m"): name one to keep its state across a change
// of rate.
//
// Keys never come from gin's c.ClientIP(), which trusts forwarding headers
// from every proxy unless SetTrustedProxies was called; the default key is
// keyfunc.IP(), the peer address. For keyfunc.Route, the middleware sets
// r.Pattern to c.FullPath() (the route template) when nothing else set it.
// Key keys requests by what an earlier handler stored with c.Set:
//
//	r.Use(authenticate) // c.Set("user", id)
//	r.Use(ginlimit.New(lim, core.PerSecond(10), redlimit.WithKey(ginlimit.Key("user"))))
//
// A rules table's patterns are ServeMux's, not gin's ({id}, not :id);
// CheckRules reports the rules that match no route of an engine.
package ginlimit

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/ctxvalue"
	rulepattern "github.com/redlimit/redlimit/internal/pattern"
	"github.com/redlimit/redlimit/keyfunc"
)

// New returns a gin middleware that limits the requests it handles by
// limit, with the redlimit Options. It panics if the limit or an option is
// invalid: it runs at start-up.
func New(l *core.Limiter, limit core.Limit, opts ...redlimit.Option) gin.HandlerFunc {
	p, err := redlimit.NewPolicy(l, limit, opts...)
	if err != nil {
		panic(err)
	}
	return Middleware(p)
}

// Rules returns a gin middleware that applies a rules table: each request
// is limited by the rule that matches its path, if any. Errors name the bad
// rule. Patterns are net/http ServeMux patterns ("GET /users/{id}"), not
// gin's; once the routes are registered, CheckRules tells whether each
// rule matches one.
func Rules(l *core.Limiter, rules redlimit.Rules, opts ...redlimit.Option) (gin.HandlerFunc, error) {
	rs, err := redlimit.NewRuleSet(l, rules, opts...)
	if err != nil {
		return nil, err
	}
	return Middleware(rs), nil
}

// Middleware returns a gin middleware for a redlimit.Policy: one made by
// redlimit.NewPolicy, or a *redlimit.RuleSet.
func Middleware(p redlimit.Policy) gin.HandlerFunc {
	return func(c *gin.Context) {
		r := c.Request
		if r.Pattern == "" {
			r.Pattern = c.FullPath()
		}
		// Where Key and Tier find the gin context, and where the request's
		// Decisions are recorded: the handlers get the request Serve served
		// (with a budget's Usage too), and find them (redlimit.DecisionsFrom).
		ctx := redlimit.ContextWithDecisions(r.Context())
		r = r.WithContext(context.WithValue(ctx, contextKey{}, c))
		d := redlimit.Serve(p, c.Writer, r, func(_ http.ResponseWriter, served *http.Request) int {
			c.Request = served
			c.Next()
			return c.Writer.Status()
		})
		if !d.Allowed() {
			c.Abort()
		}
	}
}

// contextKey is where the middleware puts the gin context in the context
// of the request it decides, for Key and Tier.
type contextKey struct{}

// Key keys requests by the value a gin handler before the middleware
// stored under name with c.Set, as "<name>:<value>": Key("user") with
// c.Set("user", "alice") is "user:alice", the key keyfunc.ContextUser
// gives on another adapter, so both share a limit. The value may be a
// string, any integer type or a fmt.Stringer. A request without the value
// (or with an empty string) is an error wrapping keyfunc.ErrNoKey, so the
// policy answers it 400 and logs it, unless keyfunc.First falls back; a
// value of another type is an error too. Key finds the gin context only
// in requests decided by this package's middleware; elsewhere it is an
// error wrapping keyfunc.ErrNoKey. The middleware puts the gin context
// in the context of every request it decides (two allocations a request),
// whether or not Key is called: Key may be called at any time. The Func is
// safe for concurrent use.
func Key(name string) keyfunc.Func {
	return func(r *http.Request) (string, error) {
		c, ok := r.Context().Value(contextKey{}).(*gin.Context)
		if !ok {
			return "", fmt.Errorf("%w: ginlimit.Key(%q) reads the gin context, and this request was not decided by a ginlimit middleware", keyfunc.ErrNoKey, name)
		}
		v, _ := c.Get(name)
		return ctxvalue.Key("gin", name, v)
	}
}

// Tier tells a rules table's tiers (redlimit.WithTier) and a policy's
// limit sets (redlimit.WithLimitSets) by the value a gin handler before
// the middleware stored under name with c.Set, a string or a
// fmt.Stringer: with c.Set("plan", "pro"), rules "* tier=pro" and the set
// "pro" apply. A request without the value is of the default (the rules
// without a tier, the policy's own limits); a value of another type is an
// error, logged, and the request decided by the default. Like Key, it finds the gin context only
// in requests decided by this package's middleware. The function is safe for
// concurrent use.
//
//	ginlimit.Rules(lim, rules, redlimit.WithTier(ginlimit.Tier("plan")))
//	ginlimit.New(lim, core.PerSecond(10), redlimit.WithLimitSets(plans, ginlimit.Tier("plan")))
func Tier(name string) func(redlimit.Request) (string, error) {
	return func(q redlimit.Request) (string, error) {
		c, ok := q.Context.Value(contextKey{}).(*gin.Context)
		if !ok {
			return "", fmt.Errorf("ginlimit.Tier(%q) reads the gin context, and this request was not decided by a ginlimit middleware", name)
		}
		v, _ := c.Get(name)
		return ctxvalue.Tier("gin", name, v)
	}
}

// CheckRules reports, in one error wrapping redlimit.ErrInvalidRules, the
// rules of a table that match no route of engine (none of engine.Routes()
// could receive a request the rule matches), and a pattern no request can
// match. It returns nil when every rule can apply. Call it once the routes
// are registered, at start-up, and before a RuleSet.Update of an engine's
// rules. The catch-all "*" applies to every request and is not checked; a
// rule's host is not looked at (gin does not route on it). It errs on the
// side of a match: a parameter after a prefix ("/files/x_:name") is taken
// to match any segment. It does no I/O.
func CheckRules(engine *gin.Engine, rules redlimit.Rules) error {
	var routes []rulepattern.Route
	for _, r := range engine.Routes() {
		routes = append(routes, rulepattern.Route{Method: r.Method, Path: r.Path})
	}
	unrouted, err := rulepattern.Unrouted(rules, routes)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", redlimit.ErrInvalidRules, err)
	case len(unrouted) > 0:
		return fmt.Errorf("%w: %s: no route of the gin engine matches%s", redlimit.ErrInvalidRules, rulepattern.Quote(unrouted), rulepattern.Hint(unrouted))
	}
	return nil
}
