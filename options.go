package redlimit

import (
	"net/http"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
)

// Option configures a policy. Every adapter (nethttp, ginlimit, echolimit,
// grpclimit's With) takes the same Options; a rules table gives each of
// its rules the same.
//
// The options that take a function of an *http.Request (WithKey, WithSkip,
// WithRequestLimits, WithObserver, WithResponseCost, WithDenyHandler) are
// HTTP's: a request of another protocol (Request.HTTP nil) has no
// *http.Request to give them. What each does then is in its
// documentation; grpclimit has options of its own that read a call.
type Option func(*options)

// options is what the Options of a policy say: the functions of a request
// in the form every protocol calls (RequestFuncs, and the budgets');
// httpOnly, the options among them that read only HTTP requests; and
// Rest, the others.
type options struct {
	RequestFuncs
	httpOnly httpOnly
	Rest     config
}

// httpOnly names the options ("redlimit.WithKey") whose function of an
// *http.Request is the policy's Key, Skip or Limits, or a budget's; ""
// when that function reads requests of every protocol, or is not set.
// HTTPOptions reports them.
type httpOnly struct {
	key, skip, limits, budget string
	alsoKey                   string // WithAlsoKey's
}

// RequestFuncs are a policy's functions of a request of any protocol, by
// its description (Request): what WithKey, WithSkip, WithRequestLimits,
// WithObserver and WithResponseCost set for HTTP requests. Adapters of
// other protocols (grpclimit) set them with WithRequestFuncs, and so may
// code that decides requests with ServeRequest. Each must be safe for
// concurrent use.
type RequestFuncs struct {
	// Key tells requests apart, as WithKey's function; an error is a
	// request without a key (400).
	Key func(q Request) (string, error)
	// Skip exempts the requests for which it returns true, as WithSkip's.
	Skip func(q Request) bool
	// Limits picks a request's limits, as WithRequestLimits's; nil
	// limits: the policy's own.
	Limits func(q Request) ([]core.Limit, error)
	// Observe sees every decision, as WithObserver's.
	Observe func(q Request, d Decision)
	// ResponseCost is an admitted request's true cost after its handler,
	// as WithResponseCost's: status is HTTP's (a gRPC call's code mapped to
	// it), header the response header (nil for a request of another
	// protocol).
	ResponseCost func(q Request, status int, header http.Header) int
	// Budgets are limits in other units than requests, as WithBudget's.
	Budgets []RequestBudget
}

// WithRequestFuncs sets the functions of f that are not nil: Key, Skip,
// Limits and ResponseCost in place of those set before (by WithKey,
// WithSkip, WithRequestLimits, WithResponseCost or another
// WithRequestFuncs); Observe after the observers already set, as
// WithObserver adds one; and it adds f's Budgets, as WithBudget adds
// one.
func WithRequestFuncs(f RequestFuncs) Option {
	return func(c *options) {
		if f.Key != nil {
			c.Key, c.httpOnly.key = f.Key, ""
		}
		if f.Skip != nil {
			c.Skip, c.httpOnly.skip = f.Skip, ""
		}
		if f.Limits != nil {
			c.Limits, c.httpOnly.limits = f.Limits, ""
		}
		if f.ResponseCost != nil {
			c.ResponseCost = f.ResponseCost
		}
		for _, b := range f.Budgets {
			b.Limits = append([]core.Limit(nil), b.Limits...)
			c.Budgets = append(c.Budgets, b)
		}
		if observe := f.Observe; observe != nil {
			if prev := c.Observe; prev != nil {
				c.Observe = func(q Request, d Decision) { prev(q, d); observe(q, d) }
			} else {
				c.Observe = observe
			}
		}
	}
}

// HTTPOptions returns the names of the options p was built with whose
// functions read only HTTP requests ("redlimit.WithKey",
// "redlimit.WithSkip", "redlimit.WithRequestLimits",
// "redlimit.WithBudget", "redlimit.WithAlsoKey"): a request of another
// protocol would find no key under them, never be skipped, never have its
// limits picked, or never be estimated. An adapter of another protocol
// (grpclimit) refuses such a policy when it is built. For a rules table,
// the options given to NewRuleSet.
func HTTPOptions(p Policy) []string {
	var h httpOnly
	switch p := p.(type) {
	case *policy:
		h = p.httpOnly
	case *RuleSet:
		h = p.conf.httpOnly
	}
	var names []string
	for _, name := range []string{h.key, h.skip, h.limits, h.budget, h.alsoKey} {
		if name != "" {
			names = append(names, name)
		}
	}
	return names
}

// config is what the Options of a policy say, but for the functions of a
// request.
type config struct {
	name    string
	also    []core.Limit
	cost    int
	failure Failure
	dryRun  bool
	answer  answerer
	maxCost int // WithMaxCost's; 0: defaultMaxCost
	tier    func(q Request) (string, error)
	// WithLimitFailure's; nil: failure for every limit
	limitFailure func(l core.Limit) Failure

	limitSets map[string]string               // WithLimitSets': name to limit string
	pickSet   func(q Request) (string, error) // WithLimitSets' pick
	alsoKeys  []alsoKey                       // WithAlsoKey's
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
	return func(c *options) { c.Rest.name = name }
}

// WithAlso enforces more limits together with the policy's own, for the
// same key, all or nothing, in the same round trip: 10/s and 1000/h. A
// request denied by any limit is charged to none. The X-RateLimit-* fields
// describe the binding limit (the denying one, or the one with the fewest
// remaining); the draft profile lists every limit. Limits that would share
// state with another of the policy (same algorithm and period) are an
// error at construction.
func WithAlso(limits ...core.Limit) Option {
	return func(c *options) { c.Rest.also = append(c.Rest.also, limits...) }
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
// pick reads HTTP requests: a request of another protocol is decided by
// the policy's own limits, and grpclimit refuses the option (its WithLimits
// picks a call's). For plans known by name, WithLimitSets checks each
// plan's limits when the policy is built, where this finds a burst below
// the cost only per request.
func WithRequestLimits(pick func(r *http.Request) ([]core.Limit, error)) Option {
	return func(c *options) {
		c.Limits, c.httpOnly.limits = nil, ""
		if pick != nil {
			c.Limits = func(q Request) ([]core.Limit, error) {
				if q.HTTP == nil {
					return nil, nil
				}
				return pick(q.HTTP)
			}
			c.httpOnly.limits = "redlimit.WithRequestLimits"
		}
	}
}

// WithKey sets how requests are told apart. The default is keyfunc.IP():
// the peer address, ignoring forwarding headers. A request for which the
// Func fails is answered 400 Bad Request; use keyfunc.First to fall back
// to another key instead. f reads HTTP requests: a request of another
// protocol has no key under it (400), and grpclimit refuses the option at
// construction (its WithKey and WithIPKey key calls).
func WithKey(f keyfunc.Func) Option {
	return func(c *options) {
		c.Key, c.httpOnly.key = nil, ""
		if f != nil {
			c.Key, c.httpOnly.key = httpKey(f), "redlimit.WithKey"
		}
	}
}

// WithRequestKey sets how requests of any protocol are told apart, by
// their description, in place of WithKey's function (the later of the two
// wins). It is for code that decides requests of other protocols with
// ServeRequest (grpclimit's WithKey and WithIPKey key calls for you). A
// request for which key fails is answered as by WithKey. key must be safe
// for concurrent use.
func WithRequestKey(key func(q Request) (string, error)) Option {
	return func(c *options) {
		c.Key, c.httpOnly.key = nil, "" // nil: refused, as WithKey(nil) is
		if key != nil {
			c.Key = func(q Request) (string, error) { return key(q) }
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
	return func(c *options) { c.Rest.cost = n }
}

// WithSkip exempts the requests for which skip returns true (health checks,
// allow-lists): they pass without a decision and without headers. The
// default skips nothing. skip reads HTTP requests: a request of another
// protocol is never skipped by it, and grpclimit refuses the option (its
// WithSkip exempts calls).
func WithSkip(skip func(r *http.Request) bool) Option {
	return func(c *options) {
		c.Skip, c.httpOnly.skip = nil, ""
		if skip != nil {
			c.Skip = func(q Request) bool { return q.HTTP != nil && skip(q.HTTP) }
			c.httpOnly.skip = "redlimit.WithSkip"
		}
	}
}

// WithFailure sets what happens when Redis fails or does not answer in
// time; the default is FailOpen.
func WithFailure(f Failure) Option {
	return func(c *options) { c.Rest.failure = f }
}

// WithDryRun makes the policy decide and report but never block: every
// request passes without rate-limit headers, and requests that would have
// been denied are logged (debug level each, a count at info level at most
// once a second) and observed as OutcomeDryRun. Requests without a key and
// Redis failures pass too, whatever the failure policy. Use it to roll out
// a new limit.
func WithDryRun() Option {
	return func(c *options) { c.Rest.dryRun = true }
}

// WithObserver calls observe with every decision, after it is made and
// before the request is served or answered: for metrics (see the
// promlimit and otellimit modules) and for Redis errors (Decision.Err),
// which are also logged through the Limiter's logger (core.WithLogger) at
// most once a second per policy. Several WithObserver options each see
// every decision, in the order given. Without one, Decision.Duration is
// not measured. observe must be fast and safe for concurrent use. r is
// nil for a request of another protocol (a gRPC call): observe sees its
// decision all the same (promlimit's and otellimit's observers count it);
// grpclimit's WithObserver gives an observer the call's context and method.
func WithObserver(observe func(r *http.Request, d Decision)) Option {
	if observe == nil {
		return func(*options) {}
	}
	return WithRequestFuncs(RequestFuncs{Observe: func(q Request, d Decision) { observe(q.HTTP, d) }})
}

// WithHeaders chooses the rate-limit response fields; the default is
// HeadersXRateLimit.
func WithHeaders(profile HeaderProfile) Option {
	return func(c *options) { c.Rest.answer.profile = profile }
}

// WithResetUnix makes X-RateLimit-Reset the Unix time, in whole seconds
// rounded up, at which the allowance is full again, as ulule/limiter and
// go-chi/httprate send it. The default is the number of seconds from now,
// which needs no synchronised clocks.
func WithResetUnix() Option {
	return func(c *options) { c.Rest.answer.resetUnix = true }
}

// WithRetryAfterJitter spreads the Retry-After of denials: each is the
// wait the limit needs plus a random share of up to max, so clients denied
// in the same second do not all come back in the same second. It only ever
// adds. The default, 0, adds nothing.
func WithRetryAfterJitter(max time.Duration) Option {
	return func(c *options) { c.Rest.answer.jitter = max }
}

// WithPartitionKey adds the draft's pk parameter to every RateLimit list
// member: a keyed hash (HMAC-SHA256, 12 bytes) of the request's key, so a
// client can tell its partitions apart and nobody can read an address out
// of it. secret must be at least 16 bytes and the same on every instance.
// The default sends no pk.
func WithPartitionKey(secret []byte) Option {
	return func(c *options) { c.Rest.answer.pkSecret = append([]byte(nil), secret...) }
}

// WithProblemDetails answers requests that do not pass with an RFC 9457
// problem (application/problem+json): a denial as the draft's
// quota-exceeded type, listing the policies that denied in
// "violated-policies"; 503 and 400 as about:blank. The default is the
// JSON body {"error":"...","retry_after":N}.
func WithProblemDetails() Option {
	return func(c *options) { c.Rest.answer.problem = true }
}

// WithDenyHandler replaces the answer to a request that does not pass:
// denied (429), Redis failing under FailClosed (503), or without a key
// (400). The rate-limit headers and Retry-After are already set on w when
// it is called; it writes the status and body. The default writes
// {"error":"...","retry_after":N} as JSON, the same in every adapter.
func WithDenyHandler(deny func(w http.ResponseWriter, r *http.Request, d Decision)) Option {
	return func(c *options) { c.Rest.answer.handler = deny }
}

// WithResponseCost settles every admitted request after its handler
// returns: cost gets the request, the status written (200 if none) and the
// response header, and returns the request's true cost. 0 refunds it
// (count only failed logins); more than WithCost charges the rest (tokens
// reported by the handler in a header), without denying: the key goes into
// debt. Without it the cost stands. It costs one more round trip per
// request, and none when cost returns WithCost's n for a policy without
// Concurrency limits. A handler that panics is settled at WithCost's n,
// without calling cost (its budgets, if any, at what it reported to its
// Usage: see Budget.Cost).
// A cost above WithMaxCost's n (by default 4294967295) is charged
// that n; a negative cost is logged as an invalid response cost and the
// reserved one stands; either way the request's slots are freed. cost
// must be safe for concurrent use. docs/lifecycle.md shows the patterns.
// For a request of another protocol, cost gets a nil request and a nil
// header, and the HTTP status of its outcome (grpclimit maps a call's
// code; its own WithResponseCost gives a cost function the call).
func WithResponseCost(cost func(r *http.Request, status int, header http.Header) int) Option {
	return func(c *options) {
		c.ResponseCost = nil
		if cost != nil {
			c.ResponseCost = func(q Request, status int, header http.Header) int { return cost(q.HTTP, status, header) }
		}
	}
}

// defaultMaxCost is WithMaxCost's default: the largest cost a settlement
// takes (core.Reservation.Settle refuses more), 4294967295 (int's largest
// where int is 32 bits).
const defaultMaxCost = core.MaxCount

// WithMaxCost caps what one request may be charged after its handler: a
// cost WithResponseCost returns above n (bytes served, tokens used) is
// charged n, and logged at warn level, at most once a second per policy.
// The default, and what 0 means, is 4294967295, the largest cost a
// settlement (core.Reservation.Settle) takes. n must be between WithCost's
// n and 4294967295, or the policy is refused. Without WithResponseCost it changes
// nothing.
func WithMaxCost(n int) Option {
	return func(c *options) { c.Rest.maxCost = n }
}

// WithTier says how a rules table finds a request's tier (its plan, looked
// up from an API key, a header, a claim), for rules written for a tier:
// "* tier=pro", "POST /v1/batch tier=pro". A request of a tier with rules
// of its own is decided by them, and by the table's other rules for the
// patterns they do not name; a request whose tier has no rules of its own,
// or that tier returns "" for, by the rules without a tier, the default.
// An error is logged at warn level (at most once a second) and the request
// decided under the default's rules: never without a limit. A rule's state
// is kept under its pattern whatever the tier, so a key that moves from
// one tier to another keeps what it has used of every limit of the same
// algorithm and period (docs/budgets.md#tiers). tier reads the request's
// description, so it serves gRPC calls too (grpclimit.WithRules); ginlimit.Tier
// and echolimit.Tier read a value an earlier handler stored. tier must be
// safe for concurrent use. Only for rules tables (NewRuleSet): a policy of
// one set of limits refuses it.
func WithTier(tier func(q Request) (string, error)) Option {
	return func(c *options) { c.Rest.tier = tier }
}
