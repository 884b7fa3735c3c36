package core

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/engine"
)

// DefaultTimeout bounds each decision unless WithTimeout says otherwise.
const DefaultTimeout = 100 * time.Millisecond

// DefaultDenyCacheKeys is how many denied decisions a Limiter remembers
// unless WithDenyCache says otherwise: at most about 5 MB.
const DefaultDenyCacheKeys = 10_000

// Limiter makes rate-limit decisions, each one atomic Lua script on Redis.
//
// A Limiter is safe for concurrent use by multiple goroutines, and any
// number of Limiters, in any number of processes, may share keys through
// one Redis: that is the point. Create Limiters with New; the zero Limiter
// is not usable: its decisions return an error, its Stats are zero, and
// everything that takes a Limiter (redlimit.NewPolicy, the adapters,
// grpclimit, envoyrls, roundtrip, the metrics modules) refuses it, as it
// refuses nil.
//
// Each decision is bounded by the Limiter's timeout and its context,
// whichever ends first (WithTimeout). A decision is sent to Redis at most
// once, so a lost reply is an error and is never counted twice.
// Concurrent decisions share round trips, a key Redis has just denied is
// answered in process (WithDenyCache), and while Redis keeps failing
// decisions fail at once (WithBreaker). docs/engine.md tells how.
//
// State lives under keys named "<prefix>{<key>}:<algorithm>:<period>", so
// a limit whose Rate or Burst changes keeps its state, and limits of
// different periods or algorithms on one key keep apart.
type Limiter engine.Limiter

// e is the engine's Limiter l is.
func (l *Limiter) e() *engine.Limiter { return (*engine.Limiter)(l) }

// Option configures a Limiter in New.
type Option func(*options)

// options are the settings New reads.
type options = engine.Config

// WithPrefix sets the string every Redis key starts with; the default is
// "redlimit:", and "" means none. Limiters with different prefixes never
// share state: give each app, or each instance for limits per instance,
// its own. In key names its '%', '{', '}' and every ':' but a final one
// are written as %25, %7B, %7D and %3A, so that it can neither move the
// Cluster hash tag off the key nor pass for another prefix and a scope:
// "redlimit:" stays, "redlimit:pod-7:" is written "redlimit%3Apod-7:".
func WithPrefix(prefix string) Option {
	return func(c *options) { c.Prefix = prefix }
}

// WithClock makes the Limiter read time from now and pass it to the
// scripts, instead of each script reading the Redis server's clock (TIME),
// which is the default; nil restores the default. Use it for deterministic
// tests: every process sharing keys must otherwise have closely
// synchronised clocks.
func WithClock(now func() time.Time) Option {
	return func(c *options) { c.Clock = now }
}

// WithTimeout bounds each decision: past d without an answer from Redis, it
// returns an error wrapping ErrTimeout and context.DeadlineExceeded. The
// default is DefaultTimeout; 0 (or less) means none, so that only the
// context bounds a decision. The context always does, whichever ends first.
func WithTimeout(d time.Duration) Option {
	return func(c *options) { c.Timeout = max(0, d) }
}

// WithBatchScript sets whether a batch of decisions sent to a single Redis
// server goes as one call of a script that makes each decision in turn
// (each stays atomic and independent), and on a Cluster whether the
// decisions of one key do. The default is on; turn it off behind a proxy
// that routes a script by its first key (twemproxy, Envoy's Redis proxy).
func WithBatchScript(on bool) Option {
	return func(c *options) { c.BatchScript = on }
}

// WithDenyCache sets how many denied keys the Limiter remembers, to answer
// them in process until their RetryAfter instead of asking Redis again.
// The default is DefaultDenyCacheKeys; 0 (or less) turns the cache off.
// When full, it forgets the least recently denied key.
func WithDenyCache(keys int) Option {
	return func(c *options) { c.DenyKeys = max(0, keys) }
}

// WithDenyCacheMaxAge bounds how long the deny cache answers for a key
// without asking Redis, whatever its RetryAfter: a Reset or a raised limit
// through another Limiter takes effect here within it. The default is 1 s;
// 0 (or less) turns the cache off.
func WithDenyCacheMaxAge(d time.Duration) Option {
	return func(c *options) { c.DenyMaxAge = max(0, d) }
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
	return func(c *options) { c.BreakerAfter = max(0, after) }
}

// WithLogger sets where the Limiter, and the HTTP policies built on it,
// log: the breaker opening and closing, Redis errors of requests (at most
// one line a second per policy) and dry runs. Nothing is logged per
// decision above debug level. The default is slog.Default() when New
// runs; nil restores it.
func WithLogger(log *slog.Logger) Option {
	return func(c *options) { c.Log = log }
}

// New returns a Limiter that runs its scripts on rdb: a *redis.Client,
// *redis.ClusterClient, *redis.Ring, a Sentinel failover client or any
// redis.UniversalClient. New does no I/O and starts no goroutine. It panics
// if rdb is nil, a programming error better found at start-up than on the
// first request.
func New(rdb redis.Scripter, opts ...Option) *Limiter {
	c := engine.DefaultConfig()
	for _, opt := range opts {
		opt(&c)
	}
	return (*Limiter)(engine.New(rdb, c))
}

// Allow is AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.AllowN(ctx, key, limit, 1)
}

// AllowN asks to admit n events for key under limit, all or nothing: either
// all n are counted and Result.Allowed is true, or none is.
//
// n = 0 reports the key's state without changing it (Allowed is true). An n
// above the limit's burst can never be allowed: the result is not Allowed,
// consumes nothing, reports the state, and has RetryAfter InfDuration. A
// negative n, an invalid limit or an invalid key is an error and nothing is
// sent to Redis. A failed decision returns a zero Result and an error that
// wraps the cause (errors.Is works): ErrTimeout, ErrUnavailable, the
// context's error, or the client's.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	res, err := l.e().AllowN(ctx, key, engine.Limit(limit), n)
	return result(res), err
}

// AllowAll admits n events for key only if every limit allows them, in one
// atomic decision (one script, one round trip): a denial by any limit
// changes the state of none. It takes 1 to 16 limits, which must differ in
// Algorithm (or variant: stepped, shape) or Period, else the error wraps
// ErrInvalidLimit. A limit's state on a key is the same whether it is
// decided alone (AllowN) or with others, so the two may be mixed.
//
// The Result is the binding limit's: Result.Limit is the denying limit with
// the longest RetryAfter, or, when allowed, the limit with the fewest
// Remaining; ResetAfter is the longest of all and Delay the longest of the
// allowed. An n above any limit's burst is never allowed (RetryAfter
// InfDuration) and consumes nothing. Errors are as AllowN's.
func (l *Limiter) AllowAll(ctx context.Context, key string, limits []Limit, n int) (Result, error) {
	var buf [engine.MaxLimits]engine.Limit
	res, err := l.e().AllowAll(ctx, key, convert(limits, &buf), n)
	return result(res), err
}

// Reset forgets the state of key under limit (its algorithm, variant and
// period), giving it its full allowance back, and makes this Limiter's deny
// cache forget every denial that involved it. Other limits' state for the
// same key is untouched. It is bounded like a decision.
func (l *Limiter) Reset(ctx context.Context, key string, limit Limit) error {
	return l.e().Reset(ctx, "", key, engine.Limit(limit))
}

// Stats returns the Limiter's counters. It is cheap and safe for
// concurrent use. A nil or zero Limiter's are all zero.
func (l *Limiter) Stats() Stats { return Stats(l.e().Stats()) }
