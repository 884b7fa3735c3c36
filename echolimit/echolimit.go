// Package echolimit puts redlimit in front of echo (v4) handlers.
//
//	e.Use(echolimit.New(lim, core.PerSecond(20)))                       // every route
//	g := e.Group("/api", echolimit.New(lim, core.PerSecond(100)))        // a group
//	e.POST("/login", login, echolimit.New(lim, core.PerMinute(5)))       // one route
//
// A request that does not pass is answered as by every adapter: the JSON
// body {"error":"rate limit exceeded","retry_after":3}, a problem with
// redlimit.WithProblemDetails, or the deny handler of
// redlimit.WithDenyHandler. With redlimit.WithFrameworkErrors the
// middleware returns an *echo.HTTPError instead (429, 503 or 400, the
// Redis error attached with WithInternal) for echo's error handler to
// render. Rate-limit headers and Retry-After are set on the response first.
//
// Keys never come from echo's c.RealIP(), which believes X-Forwarded-For
// unless an IPExtractor is set; the default key is keyfunc.IP(), the peer
// address. For keyfunc.Route, the middleware sets r.Pattern to c.Path()
// (the route template) when nothing else set it. Use it with e.Use, not
// e.Pre: before routing there is no route.
package echolimit

import (
	"github.com/labstack/echo/v4"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// New returns an echo middleware that limits the requests it handles by
// limit, with the redlimit Options. It panics if the limit or an option is
// invalid: it runs at start-up.
func New(l *core.Limiter, limit core.Limit, opts ...redlimit.Option) echo.MiddlewareFunc {
	return Middleware(redlimit.MustPolicy(l, limit, opts...))
}

// Rules returns an echo middleware that applies a rules table: each request
// is limited by the rule that matches its path, if any. Errors name the bad
// rule.
func Rules(l *core.Limiter, rules redlimit.Rules, opts ...redlimit.Option) (echo.MiddlewareFunc, error) {
	rs, err := redlimit.NewRuleSet(l, rules, opts...)
	if err != nil {
		return nil, err
	}
	return Middleware(rs), nil
}

// Middleware returns an echo middleware for a Policy or a RuleSet built by
// hand.
func Middleware(m redlimit.Matcher) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if r.Pattern == "" {
				r.Pattern = c.Path()
			}
			p := m.Match(r)
			if p == nil {
				return next(c)
			}
			d := p.Decide(c.Response(), r)
			switch {
			case d.Allowed():
				return next(c)
			case p.FrameworkErrors(): // echo's error handler answers
				he := echo.NewHTTPError(d.Status, d.Body().Error)
				if d.Err != nil {
					he = he.WithInternal(d.Err)
				}
				return he
			}
			p.Deny(c.Response(), r, d)
			return nil
		}
	}
}
