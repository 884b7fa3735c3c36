package redlimit

import (
	"log/slog"
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
// which the failure policy decides the request. The default logs to the
// policy's logger (WithLogger) at error level, at most once a second per
// policy, counting the errors it left out.
func WithErrorHandler(report func(r *http.Request, err error)) Option {
	return func(p *Policy) { p.onError = report }
}

// WithLogger sets where the policy logs: Redis errors (error level, at
// most one line a second, unless WithErrorHandler takes them) and a dry
// run's would-be denials (debug level each, an info line at most once a
// second). Every line carries the policy's name and is logged with the
// request's context. Nothing is logged per request above debug level. The
// default is slog.Default() when the policy is built.
func WithLogger(log *slog.Logger) Option {
	return func(p *Policy) { p.log = log }
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
// have been denied are logged (debug level each, a count at info level at
// most once a second; see WithLogger) and reported to the observer with
// Decision.DryRun set. Requests without a key and Redis
// failures pass too, whatever the failure policy. Use it to roll out a new
// limit.
func WithDryRun() Option {
	return func(p *Policy) { p.dryRun = true }
}

// WithObserver calls observe with every decision, after it is made and
// before the request is served or denied: for metrics (see the promlimit
// and otellimit modules). Several WithObserver options each see every
// decision, in the order given. The default observes nothing, and then
// Decision.Duration is not measured. observe must be fast and safe for
// concurrent use.
func WithObserver(observe func(r *http.Request, d Decision)) Option {
	return func(p *Policy) {
		if prev := p.observe; prev != nil {
			p.observe = func(r *http.Request, d Decision) { prev(r, d); observe(r, d) }
			return
		}
		p.observe = observe
	}
}

// WithHeaders chooses the rate-limit response fields; the default is
// HeadersXRateLimit.
func WithHeaders(profile HeaderProfile) Option {
	return func(p *Policy) { p.profile = profile }
}

// WithResetUnix makes X-RateLimit-Reset the Unix time, in whole seconds
// rounded up, at which the allowance is full again, as ulule/limiter and
// go-chi/httprate send it, for clients written against them. The default
// is the number of seconds from now, which needs no synchronised clocks.
func WithResetUnix() Option {
	return func(p *Policy) { p.resetUnix = true }
}

// WithRetryAfterJitter spreads the Retry-After of denials: each is the
// wait the limit needs plus a random share of up to max, so clients denied
// in the same second do not all come back in the same second. It only ever
// adds: no client is told to come back before its allowance is there. The
// JSON and problem bodies carry the same value. The default, 0, adds
// nothing.
func WithRetryAfterJitter(max time.Duration) Option {
	return func(p *Policy) { p.jitter = max }
}

// WithPartitionKey adds the draft's pk parameter to every RateLimit list
// member: a keyed hash (HMAC-SHA256, 12 bytes) of the request's key, so a
// client can tell its partitions apart and nobody can read an address out
// of it. secret must be at least 16 bytes and the same on every instance.
// The default sends no pk.
func WithPartitionKey(secret []byte) Option {
	return func(p *Policy) { p.pkSecret = append([]byte(nil), secret...) }
}

// WithProblemDetails answers requests that do not pass with an RFC 9457
// problem (application/problem+json): a denial as the draft's
// quota-exceeded type, listing the policies that denied in
// "violated-policies"; 503 and 400 as about:blank. The default is the
// JSON body {"error":"...","retry_after":N}. WithDenyHandler replaces
// either.
func WithProblemDetails() Option {
	return func(p *Policy) { p.problem = true }
}

// WithFrameworkErrors makes adapters whose framework handles errors (echo)
// hand a request that does not pass to it, as an *echo.HTTPError, instead
// of writing the default body; the rate-limit headers are set either way.
// net/http and gin always write the body. The default writes it.
func WithFrameworkErrors() Option {
	return func(p *Policy) { p.frameworkErrors = true }
}
