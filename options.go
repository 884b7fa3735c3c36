package redlimit

import (
	"net/http"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
)

// Option configures a policy. Every adapter (nethttp, ginlimit, echolimit)
// takes the same Options; a rules table gives each of its rules the same.
type Option func(*config)

// config is what the Options of a policy say.
type config struct {
	name string
	also []core.Limit
	pick func(*http.Request) ([]core.Limit, error)
	key  keyfunc.Func
	// requestKey: WithRequestKey's; when set, it keys every request
	requestKey func(Request) (string, error)
	cost       int
	skip       func(*http.Request) bool
	observe    func(*http.Request, Decision)
	failure    Failure
	dryRun     bool
	answer     answerer
	// responseCost: WithResponseCost's
	responseCost func(r *http.Request, status int, header http.Header) int
	maxCost      int // WithMaxCost's; 0: defaultMaxCost
}

// WithName names the policy. The name is the scope of its state in Redis,
// so two policies of one Limiter share state exactly when they share a
// name; it is also the metrics label and the RateLimit-Policy name. The
// default is the policy's limits as written ("100/m", "10/s, 1000/h
// fixed_window"), so two unnamed policies with the same limits share
// state, a global 100/m and a route's 5/m never do, and an unnamed policy
// whose rate changes starts afresh. Name a policy to keep its state (and
// its metrics series) across a change of rate. A name is 1 to 256 bytes of
// printable ASCII.
func WithName(name string) Option {
	return func(c *config) { c.name = name }
}

// WithAlso enforces more limits together with the policy's own, for the
// same key, all or nothing, in the same round trip: 10/s and 1000/h. A
// request denied by any limit is charged to none. The X-RateLimit-* fields
// describe the binding limit (the denying one, or the one with the fewest
// remaining); the draft profile lists every limit. Limits that would share
// state with another of the policy (same algorithm and period) are an
// error at construction.
func WithAlso(limits ...core.Limit) Option {
	return func(c *config) { c.also = append(c.also, limits...) }
}

// WithRequestLimits picks the limits of each request, in place of the
// policy's own and WithAlso's: plan tiers, or limits an API gateway puts in
// a header. pick returns one or more limits decided together, as WithAlso's
// are; nil means the policy's own. A limit keeps its state under the
// policy's name, its algorithm and its period, so a tier whose rate
// changes keeps its state. An error from pick, limits that are invalid or
// would share state, and limits whose smallest burst is below WithCost's
// n (no request could ever be admitted) are answered 400 Bad Request,
// never let through nor denied for ever; the last two are configuration
// errors, logged at error level and observed with a Decision.Err wrapping
// core.ErrInvalidLimit or core.ErrInvalidCost. pick must be safe for
// concurrent use. Not for rules tables, whose rules say their limits.
func WithRequestLimits(pick func(r *http.Request) ([]core.Limit, error)) Option {
	return func(c *config) { c.pick = pick }
}

// WithKey sets how requests are told apart. The default is keyfunc.IP():
// the peer address, ignoring forwarding headers. A request for which the
// Func fails is answered 400 Bad Request; use keyfunc.First to fall back
// to another key instead.
func WithKey(f keyfunc.Func) Option {
	return func(c *config) { c.key, c.requestKey = f, nil }
}

// WithRequestKey sets how requests of any protocol are told apart, by
// their description, in place of WithKey's function (the later of the two
// wins). It is for adapters of protocols other than HTTP: grpclimit keys
// calls with it. A request for which key fails is answered as by WithKey.
// key must be safe for concurrent use.
func WithRequestKey(key func(q Request) (string, error)) Option {
	return func(c *config) {
		c.key, c.requestKey = nil, key
		if key == nil {
			c.key = nil // refused, as WithKey(nil) is
		}
	}
}

// WithCost sets how many events each request counts for, under each of the
// policy's limits; the default is 1. It must be between 1 and the smallest
// burst of its limits, or the policy is refused. Limits WithRequestLimits
// picks are checked per request: a request whose limits' burst is below
// the cost is answered 400 (see WithRequestLimits). The rate-limit fields
// count in the same unit: X-RateLimit-Remaining is the events left, so a
// request of cost n uses n of them.
func WithCost(n int) Option {
	return func(c *config) { c.cost = n }
}

// WithSkip exempts the requests for which skip returns true (health checks,
// allow-lists): they pass without a decision and without headers. The
// default skips nothing.
func WithSkip(skip func(r *http.Request) bool) Option {
	return func(c *config) { c.skip = skip }
}

// WithFailure sets what happens when Redis fails or does not answer in
// time; the default is FailOpen.
func WithFailure(f Failure) Option {
	return func(c *config) { c.failure = f }
}

// WithDryRun makes the policy decide and report but never block: every
// request passes without rate-limit headers, and requests that would have
// been denied are logged (debug level each, a count at info level at most
// once a second) and observed as OutcomeDryRun. Requests without a key and
// Redis failures pass too, whatever the failure policy. Use it to roll out
// a new limit.
func WithDryRun() Option {
	return func(c *config) { c.dryRun = true }
}

// WithObserver calls observe with every decision, after it is made and
// before the request is served or answered: for metrics (see the
// promlimit and otellimit modules) and for Redis errors (Decision.Err),
// which are also logged through the Limiter's logger (core.WithLogger) at
// most once a second per policy. Several WithObserver options each see
// every decision, in the order given. Without one, Decision.Duration is
// not measured. observe must be fast and safe for concurrent use.
func WithObserver(observe func(r *http.Request, d Decision)) Option {
	return func(c *config) {
		if prev := c.observe; prev != nil {
			c.observe = func(r *http.Request, d Decision) { prev(r, d); observe(r, d) }
			return
		}
		c.observe = observe
	}
}

// WithHeaders chooses the rate-limit response fields; the default is
// HeadersXRateLimit.
func WithHeaders(profile HeaderProfile) Option {
	return func(c *config) { c.answer.profile = profile }
}

// WithResetUnix makes X-RateLimit-Reset the Unix time, in whole seconds
// rounded up, at which the allowance is full again, as ulule/limiter and
// go-chi/httprate send it. The default is the number of seconds from now,
// which needs no synchronised clocks.
func WithResetUnix() Option {
	return func(c *config) { c.answer.resetUnix = true }
}

// WithRetryAfterJitter spreads the Retry-After of denials: each is the
// wait the limit needs plus a random share of up to max, so clients denied
// in the same second do not all come back in the same second. It only ever
// adds. The default, 0, adds nothing.
func WithRetryAfterJitter(max time.Duration) Option {
	return func(c *config) { c.answer.jitter = max }
}

// WithPartitionKey adds the draft's pk parameter to every RateLimit list
// member: a keyed hash (HMAC-SHA256, 12 bytes) of the request's key, so a
// client can tell its partitions apart and nobody can read an address out
// of it. secret must be at least 16 bytes and the same on every instance.
// The default sends no pk.
func WithPartitionKey(secret []byte) Option {
	return func(c *config) { c.answer.pkSecret = append([]byte(nil), secret...) }
}

// WithProblemDetails answers requests that do not pass with an RFC 9457
// problem (application/problem+json): a denial as the draft's
// quota-exceeded type, listing the policies that denied in
// "violated-policies"; 503 and 400 as about:blank. The default is the
// JSON body {"error":"...","retry_after":N}.
func WithProblemDetails() Option {
	return func(c *config) { c.answer.problem = true }
}

// WithDenyHandler replaces the answer to a request that does not pass:
// denied (429), Redis failing under FailClosed (503), or without a key
// (400). The rate-limit headers and Retry-After are already set on w when
// it is called; it writes the status and body. The default writes
// {"error":"...","retry_after":N} as JSON, the same in every adapter.
func WithDenyHandler(deny func(w http.ResponseWriter, r *http.Request, d Decision)) Option {
	return func(c *config) { c.answer.handler = deny }
}

// WithResponseCost settles every admitted request after its handler
// returns: cost gets the request, the status written (200 if none) and the
// response header, and returns the request's true cost. 0 refunds it
// (count only failed logins); more than WithCost charges the rest (tokens
// reported by the handler in a header), without denying: the key goes into
// debt. Without it the cost stands. It costs one more round trip per
// request, and none when cost returns WithCost's n for a policy without
// Concurrency limits. A handler that panics is settled at WithCost's n.
// A cost above WithMaxCost's n (by default 1e9) is charged
// that n; a negative cost is logged as an invalid response cost and the
// reserved one stands; either way the request's slots are freed. cost
// must be safe for concurrent use. docs/lifecycle.md shows the patterns.
func WithResponseCost(cost func(r *http.Request, status int, header http.Header) int) Option {
	return func(c *config) { c.responseCost = cost }
}

// defaultMaxCost is WithMaxCost's default: the largest cost a settlement
// takes (core.Reservation.Settle refuses more).
const defaultMaxCost = 1_000_000_000

// WithMaxCost caps what one request may be charged after its handler: a
// cost WithResponseCost returns above n (bytes served, tokens used) is
// charged n, and logged at warn level, at most once a second per policy.
// The default, and what 0 means, is 1e9, the largest cost a settlement
// (core.Reservation.Settle) takes. n must be between WithCost's n and
// 1e9, or the policy is refused. Without WithResponseCost it changes
// nothing.
func WithMaxCost(n int) Option {
	return func(c *config) { c.maxCost = n }
}
