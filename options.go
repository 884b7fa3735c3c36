package redlimit

import (
	"net/http"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
)

// Option configures a Policy. Every adapter (nethttp, ginlimit, echolimit)
// takes the same Options.
type Option func(*Policy)

// WithName names the policy. The name is the scope of its state in Redis
// (see core.Term), so two policies share state exactly when they share a
// name, and it is the name in the RateLimit-Policy header. The default is
// the policy's limits as core.FormatLimits writes them ("100/m", "10/s,
// 1000/h fixed_window"); two policies of one Limiter with the same default
// name are an error at construction, so that state is never shared by
// accident: name them. A name is 1 to 256 bytes of printable ASCII (a
// structured-field string of the RateLimit headers).
func WithName(name string) Option {
	return func(p *Policy) { p.name = name }
}

// WithAlso enforces more limits together with the policy's own, for the
// same key, all or nothing, in the same round trip: 10/s and 1000/h. A
// request denied by any limit is charged to none. The X-RateLimit-* fields
// describe the binding limit (the denying one, or the one with the fewest
// remaining); the draft profile lists every limit. Limits that would share
// state with another of the policy (same algorithm and period) are an
// error at construction.
func WithAlso(limits ...core.Limit) Option {
	return func(p *Policy) { p.also = append(p.also, limits...) }
}

// WithRequestLimits picks the limits of each request, in place of the
// policy's own and WithAlso's: plan tiers, or limits an API gateway puts in
// a header. pick returns one or more limits decided together, as WithAlso's
// are; nil means the policy's own. Only Rate and Burst of a limit are
// outside its state's name, so a tier whose Rate changes keeps its state,
// while a different Period or algorithm starts afresh. An error from pick,
// or limits that are invalid or would share state, are answered 400 Bad
// Request like a missing key, never let through. pick must be safe for
// concurrent use; it may not be used in a rules table.
func WithRequestLimits(pick func(r *http.Request) ([]core.Limit, error)) Option {
	return func(p *Policy) { p.pick = pick }
}

// WithKey sets how requests are told apart. The default is keyfunc.IP():
// the peer address, ignoring forwarding headers. A request for which the
// Func fails is answered 400 Bad Request (see Decision.Status); use
// keyfunc.First to fall back to another key instead.
func WithKey(f keyfunc.Func) Option {
	return func(p *Policy) { p.key = f }
}

// WithCost sets how many events each request counts for, under each of the
// policy's limits; the default is 1. It must be between 1 and the smallest
// burst of its limits.
func WithCost(n int) Option {
	return func(p *Policy) { p.cost = n }
}

// WithSkip exempts the requests for which skip returns true (health checks,
// allow-lists): they pass without a decision and without headers. The
// default skips nothing.
func WithSkip(skip func(r *http.Request) bool) Option {
	return func(p *Policy) { p.skip = skip }
}

// WithDenyHandler replaces the answer to a request that does not pass:
// denied (429), unavailable under FailClosed (503), or without a key (400).
// The rate-limit headers and Retry-After are already set on w when it is
// called; it writes the status and body. The default writes
// {"error":"...","retry_after":N} as JSON (gin and echo answer in their
// own way, see their packages).
func WithDenyHandler(deny func(w http.ResponseWriter, r *http.Request, d Decision)) Option {
	return func(p *Policy) { p.deny = deny }
}

// WithErrorHandler receives every Redis error (including timeouts), after
// which the failure policy decides the request. The default logs with
// log/slog at error level, at most once a second per policy, counting the
// errors it left out.
func WithErrorHandler(report func(r *http.Request, err error)) Option {
	return func(p *Policy) { p.onError = report }
}

// WithFailure sets what happens when Redis fails; the default is FailOpen.
func WithFailure(f Failure) Option {
	return func(p *Policy) { p.failure = f }
}

// WithLocalKeys bounds the keys the FailLocal fallback keeps in memory (one
// per key and limit); the default is DefaultLocalKeys. When full, it
// forgets the least recently used.
func WithLocalKeys(n int) Option {
	return func(p *Policy) { p.localKeys = n }
}

// WithTimeout bounds each of the policy's decisions, so a slow Redis cannot
// stall requests; past it, the decision fails with an error wrapping
// core.ErrTimeout and the failure policy applies. Without it the Limiter's
// timeout applies (core.WithTimeout; DefaultTimeout unless set). 0 means
// only the request's own context bounds it. The wait costs no goroutine.
func WithTimeout(d time.Duration) Option {
	return func(p *Policy) {
		p.timeout = d
		if d == 0 {
			p.timeout = core.InfDuration
		}
	}
}

// WithDryRun makes the policy decide and report but never block: every
// request passes, no rate-limit headers are sent, and requests that would
// have been denied are logged with log/slog at info level and reported to
// the observer with Decision.DryRun set. Requests without a key and Redis
// failures pass too, whatever the failure policy. Use it to roll out a new
// limit.
func WithDryRun() Option {
	return func(p *Policy) { p.dryRun = true }
}

// WithObserver calls observe with every decision, after it is made and
// before the request is served or denied: for metrics. The default does
// nothing. It must be fast and safe for concurrent use.
func WithObserver(observe func(r *http.Request, d Decision)) Option {
	return func(p *Policy) { p.observe = observe }
}

// WithHeaders chooses the rate-limit response fields; the default is
// HeadersXRateLimit.
func WithHeaders(profile HeaderProfile) Option {
	return func(p *Policy) { p.profile = profile }
}
