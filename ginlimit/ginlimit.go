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
package ginlimit

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
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
// rule.
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
		d := redlimit.Serve(p, c.Writer, r, func(http.ResponseWriter, *http.Request) int {
			c.Next()
			return c.Writer.Status()
		})
		if !d.Allowed() {
			c.Abort()
		}
	}
}
