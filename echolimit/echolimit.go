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
// e.Pre: before routing there is no route.
package echolimit

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
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
// rule.
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
			var err error
			redlimit.Serve(p, c.Response(), r, func(http.ResponseWriter, *http.Request) int {
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
