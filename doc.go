// Package redlimit puts distributed rate limits in front of HTTP handlers.
//
// Decisions are made by package core, one atomic Lua script on Redis each.
// This package holds what every HTTP adapter shares: the request flow (key,
// decision, headers, verdict) as a Policy, the options that configure it,
// the response headers, and rules tables for many routes. The adapters are
// thin: nethttp (func(http.Handler) http.Handler), ginlimit
// (gin.HandlerFunc) and echolimit (echo.MiddlewareFunc).
//
//	lim := core.New(rdb)
//	http.Handle("/api/", nethttp.New(lim, core.PerMinute(100))(api))
//	r.POST("/login", ginlimit.New(lim, core.PerMinute(5)), login)
//	e.Use(echolimit.New(lim, core.PerSecond(20)))
//
// Defaults, each changed by an Option: requests are keyed by the peer's IP
// address (forwarding headers are ignored unless trusted proxies are
// configured, see keyfunc.IP); each request costs 1; a Redis error or a
// decision slower than DefaultTimeout lets the request through (FailOpen)
// and is logged; answers carry X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset, and denials 429 with Retry-After.
package redlimit

import "net/http"

// Matcher picks the policy that applies to a request: a *Policy applies to
// all, a *RuleSet to those a rule matches; nil means no limit. Adapters
// accept either.
type Matcher interface {
	Match(r *http.Request) *Policy
}

var (
	_ Matcher = (*Policy)(nil)
	_ Matcher = (*RuleSet)(nil)
)
