// Package redlimit puts distributed rate limits in front of HTTP handlers.
//
// Decisions are made by package core, one atomic Lua script on Redis each.
// This package holds what every HTTP adapter shares: the request flow
// (key, decision, headers, answer) as a Policy, the Options that configure
// it, and rules tables for many routes. The adapters are thin: nethttp
// (func(http.Handler) http.Handler), ginlimit (gin.HandlerFunc) and
// echolimit (echo.MiddlewareFunc).
//
//	lim := core.New(rdb)
//	http.Handle("/api/", nethttp.New(lim, core.PerMinute(100))(api))
//	r.POST("/login", ginlimit.New(lim, core.PerMinute(5)), login)
//	e.Use(echolimit.New(lim, core.PerSecond(20)))
//
// Defaults, each changed by an Option: requests are keyed by the peer's IP
// address (forwarding headers are ignored unless trusted proxies are
// configured, see keyfunc.IP); each request costs 1; a Redis error or a
// decision slower than the Limiter's timeout lets the request through
// (FailOpen) and is logged; answers carry X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset, and denials 429 with
// Retry-After and a JSON body.
//
// A policy keeps its state in Redis under its name (WithName), which is
// also its metrics label. Unnamed, it is named by its limits ("100/m"), so
// two unnamed policies with the same limits share state, and one whose
// rate changes starts afresh: name policies whose state should outlive a
// change of rate.
package redlimit
