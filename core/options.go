package core

import (
	"log/slog"
	"time"
)

// DefaultTimeout bounds each decision unless WithTimeout says otherwise.
const DefaultTimeout = 100 * time.Millisecond

// DefaultDenyCacheKeys is how many denied decisions a Limiter remembers
// unless WithDenyCache says otherwise: at most about 5.5 MB.
const DefaultDenyCacheKeys = 10_000

// Defaults of the options without a constant of their own.
const (
	defaultDenyCacheMaxAge = time.Second            // WithDenyCacheMaxAge
	defaultBreakerAfter    = 500 * time.Millisecond // WithBreaker
)

// Option configures a Limiter in New.
type Option func(*options)

// options are the settings New reads; defaultOptions returns the
// defaults, and each With... documents its field.
type options struct {
	prefix       string
	clock        func() time.Time // nil: the Redis server's
	timeout      time.Duration
	log          *slog.Logger // nil: slog.Default() when New runs
	batchScript  bool
	breakerAfter time.Duration
	denyKeys     int
	denyMaxAge   time.Duration
	lossEvery    time.Duration

	// Only tests set these (export_test.go): the most calls in one round
	// trip and round trips in flight per server, and how long an idle
	// sender lives (transport.Config); the clock the deny cache reads when
	// the scripts read the server's (a fake server clock); and
	// fixedPrefetch, which makes every fetch ask for Prefetch events rather
	// than adapt.
	batch, senders int
	linger         time.Duration
	localClock     func() time.Time
	fixedPrefetch  bool
}

func defaultOptions() options {
	return options{prefix: "redlimit:", timeout: DefaultTimeout, batchScript: true,
		breakerAfter: defaultBreakerAfter, denyKeys: DefaultDenyCacheKeys, denyMaxAge: defaultDenyCacheMaxAge,
		lossEvery: defaultLossCheck}
}

// WithPrefix sets the string every Redis key starts with; the default is
// "redlimit:", and "" means none. Limiters with different prefixes never
// share state: give each app, or each instance for limits per instance,
// its own. In key names its '%', '{', '}' and every ':' but a final one
// are written as %25, %7B, %7D and %3A, so that it can neither move the
// Cluster hash tag off the key nor pass for another prefix and a scope:
// "redlimit:" stays, "redlimit:pod-7:" is written "redlimit%3Apod-7:".
func WithPrefix(prefix string) Option {
	return func(c *options) { c.prefix = prefix }
}

// WithClock makes the Limiter read time from now and pass it to the
// scripts, instead of each script reading the Redis server's clock (TIME),
// which is the default; nil restores the default. Use it for deterministic
// tests: every process sharing keys must otherwise have closely
// synchronised clocks.
func WithClock(now func() time.Time) Option {
	return func(c *options) { c.clock = now }
}

// WithTimeout bounds each decision: past d without an answer from Redis, it
// returns an error wrapping ErrTimeout and context.DeadlineExceeded. The
// default is DefaultTimeout; 0 (or less) means none, so that only the
// context bounds a decision. The context always does, whichever ends first.
func WithTimeout(d time.Duration) Option {
	return func(c *options) { c.timeout = max(0, d) }
}

// WithBatchScript sets whether a batch of decisions sent to a single Redis
// server goes as one call of a script that makes each decision in turn
// (each stays atomic and independent), and on a Cluster whether the
// decisions of one key do. The default is on; turn it off behind a proxy
// that routes a script by its first key (twemproxy, Envoy's Redis proxy).
func WithBatchScript(on bool) Option {
	return func(c *options) { c.batchScript = on }
}

// WithDenyCache sets how many denied keys the Limiter remembers, to answer
// them in process until their RetryAfter instead of asking Redis again.
// The default is DefaultDenyCacheKeys; 0 (or less) turns the cache off.
// When full, it forgets the least recently denied key.
func WithDenyCache(keys int) Option {
	return func(c *options) { c.denyKeys = max(0, keys) }
}

// WithDenyCacheMaxAge bounds how long the deny cache answers for a key
// without asking Redis, whatever its RetryAfter: a Reset or a raised limit
// through another Limiter takes effect here within it. The default is 1 s;
// 0 (or less) turns the cache off.
func WithDenyCacheMaxAge(d time.Duration) Option {
	return func(c *options) { c.denyMaxAge = max(0, d) }
}

// WithBreaker sets how long decisions must keep failing (at least three
// in a row, no success between) before the Limiter stops asking Redis and
// fails them at once with an error wrapping ErrUnavailable, while it
// probes Redis itself (a script call of its own every 250 ms, in the
// background: no decision waits on it) until it answers. On a Cluster or
// Ring each node has a breaker of its own, so a failing node fails only
// the decisions on its keys. Failing means no answer (a timeout, a
// connection error) or a reply that says the server cannot serve now
// (LOADING, BUSY, OOM and the like; docs/engine.md lists them); an error
// reply about the decision itself, such as WRONGTYPE on its key, is that
// decision's alone and counts as an answer. The default is 500 ms; 0 (or
// less) turns the breaker off.
func WithBreaker(after time.Duration) Option {
	return func(c *options) { c.breakerAfter = max(0, after) }
}

// WithLogger sets where the Limiter, and the HTTP policies built on it,
// log: the breaker opening and closing, Redis errors of requests (at most
// one line a second per policy) and dry runs. Nothing is logged per
// decision above debug level. The default is slog.Default() when New
// runs; nil restores it.
func WithLogger(log *slog.Logger) Option {
	return func(c *options) { c.log = log }
}

// WithLossCheck sets how often, at most, the Limiter checks that each
// Redis server kept the state of its limits: a restart without
// persistence, FLUSHALL or a failover to an empty replica leaves keys
// that look merely expired, and counts that start again from zero. While
// decisions reach Redis, one small script call and one INFO per server
// (on a Cluster or Ring, per node) run in the background, the script on a
// marker key "<prefix>{generation}" (one "<prefix>{generation:N}" per
// node) that has no TTL; no decision waits on them. Each loss is logged once at error level,
// naming the server, and counted in Stats.StateLosses; and the first
// check of a server, once the Limiter has decided a limit of an hour or
// more, warns when the server persists nothing (where CONFIG GET is
// allowed). docs/faults.md tells what it sees and what it cannot. The
// default is 1 s; 0 (or less) turns it off: nothing is written, and no
// loss is seen.
func WithLossCheck(every time.Duration) Option {
	return func(c *options) { c.lossEvery = max(0, every) }
}
