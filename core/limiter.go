package core

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultTimeout bounds each decision unless WithTimeout says otherwise.
const DefaultTimeout = 100 * time.Millisecond

// maxKeyLen is the longest key, in bytes, a Limiter accepts.
const maxKeyLen = 1024

// Limiter makes rate-limit decisions, each one atomic Lua script on Redis.
//
// A Limiter is safe for concurrent use by multiple goroutines, and any
// number of Limiters, in any number of processes, may share keys through
// one Redis: that is the point. Create Limiters with New; the zero Limiter
// is not usable (its methods return an error).
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
type Limiter struct {
	prefix   string
	clock    func() time.Time // nil: the Redis server's
	timeout  time.Duration
	log      *slog.Logger
	engine   *engine
	deny     *denyCache  // nil: off
	leases   sync.Map    // prefetched allowance: a decision's cache id -> *lease (prefetch.go)
	sweeping atomic.Bool // a goroutine sweeps leases
	peers    peers       // how many instances share the keys, for FailLocal (peers.go)
	releaser releaser    // frees the slots of failed settlements (release.go)
	// fixedPrefetch makes every fetch ask for Prefetch events rather than
	// adapt; only tests and benchmarks that compare the two set it.
	fixedPrefetch bool

	// set by options, read by New
	batch, pipelines int
	batchScript      bool
	breakerAfter     time.Duration
	denyKeys         int
	denyMaxAge       time.Duration
	// localClock replaces time.Now for the deny cache when clock is nil;
	// only tests set it (export_test.go).
	localClock func() time.Time
}

// Option configures a Limiter in New.
type Option func(*Limiter)

// WithPrefix sets the string every Redis key starts with; the default is
// "redlimit:", and "" means none. Limiters with different prefixes never
// share state: give each app, or each instance for limits per instance,
// its own. In key names its '%', '{', '}' and every ':' but a final one
// are written as %25, %7B, %7D and %3A, so that it can neither move the
// Cluster hash tag off the key nor pass for another prefix and a scope:
// "redlimit:" stays, "redlimit:pod-7:" is written "redlimit%3Apod-7:".
func WithPrefix(prefix string) Option {
	return func(l *Limiter) { l.prefix = prefix }
}

// WithClock makes the Limiter read time from now and pass it to the
// scripts, instead of each script reading the Redis server's clock (TIME),
// which is the default; nil restores the default. Use it for deterministic
// tests: every process sharing keys must otherwise have closely
// synchronised clocks.
func WithClock(now func() time.Time) Option {
	return func(l *Limiter) { l.clock = now }
}

// WithTimeout bounds each decision: past d without an answer from Redis, it
// returns an error wrapping ErrTimeout and context.DeadlineExceeded. The
// default is DefaultTimeout; 0 (or less) means none, so that only the
// context bounds a decision. The context always does, whichever ends first.
func WithTimeout(d time.Duration) Option {
	return func(l *Limiter) { l.timeout = max(0, d) }
}

// WithBatchScript sets whether a batch of decisions sent to a single Redis
// server goes as one call of a script that makes each decision in turn
// (each stays atomic and independent), and on a Cluster whether the
// decisions of one key do. The default is on; turn it off behind a proxy
// that routes a script by its first key (twemproxy, Envoy's Redis proxy).
func WithBatchScript(on bool) Option {
	return func(l *Limiter) { l.batchScript = on }
}

// WithDenyCache sets how many denied keys the Limiter remembers, to answer
// them in process until their RetryAfter instead of asking Redis again.
// The default is DefaultDenyCacheKeys; 0 (or less) turns the cache off.
// When full, it forgets the least recently denied key.
func WithDenyCache(keys int) Option {
	return func(l *Limiter) { l.denyKeys = max(0, keys) }
}

// WithDenyCacheMaxAge bounds how long the deny cache answers for a key
// without asking Redis, whatever its RetryAfter: a Reset or a raised limit
// through another Limiter takes effect here within it. The default is 1 s;
// 0 (or less) turns the cache off.
func WithDenyCacheMaxAge(d time.Duration) Option {
	return func(l *Limiter) { l.denyMaxAge = max(0, d) }
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
	return func(l *Limiter) { l.breakerAfter = max(0, after) }
}

// WithLogger sets where the Limiter, and the HTTP policies built on it,
// log: the breaker opening and closing, Redis errors of requests (at most
// one line a second per policy) and dry runs. Nothing is logged per
// decision above debug level. The default is slog.Default() when New
// runs; nil restores it.
func WithLogger(log *slog.Logger) Option {
	return func(l *Limiter) { l.log = log }
}

// New returns a Limiter that runs its scripts on rdb: a *redis.Client,
// *redis.ClusterClient, *redis.Ring, a Sentinel failover client or any
// redis.UniversalClient. New does no I/O and starts no goroutine. It panics
// if rdb is nil, a programming error better found at start-up than on the
// first request.
func New(rdb redis.Scripter, opts ...Option) *Limiter {
	if rdb == nil {
		panic("redlimit: core.New: nil redis client")
	}
	l := &Limiter{prefix: "redlimit:", timeout: DefaultTimeout, batchScript: true,
		batch: defaultBatchSize, pipelines: defaultPipelines,
		denyKeys: DefaultDenyCacheKeys, denyMaxAge: defaultDenyCacheMaxAge, breakerAfter: defaultBreakerAfter}
	for _, opt := range opts {
		opt(l)
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	l.prefix = escapePrefix(l.prefix)
	l.peers.id = l.nextID()
	l.engine = newEngine(rdb, l.batch, l.pipelines, l.batchScript, l.breakerAfter, l.log)
	if l.denyKeys > 0 && l.denyMaxAge > 0 {
		l.deny = newDenyCache(l.denyKeys, l.denyMaxAge)
	}
	return l
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
	limits := [1]Limit{limit}
	res, _, err := l.decide(ctx, key, nil, limits[:], n, nil)
	return res, err
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
	res, _, err := l.decide(ctx, key, nil, limits, n, nil)
	return res, err
}

// Reset forgets the state of key under limit (its algorithm, variant and
// period), giving it its full allowance back, and makes this Limiter's deny
// cache forget every denial that involved it. Other limits' state for the
// same key is untouched. It is bounded like a decision.
func (l *Limiter) Reset(ctx context.Context, key string, limit Limit) error {
	return l.reset(ctx, "", key, limit)
}

// Stats are a Limiter's counters, for metrics. Every counter starts at 0
// when New returns and only grows.
type Stats struct {
	// BreakerOpen is true while a breaker is open: Redis (on a Cluster or
	// Ring, one of its nodes) kept failing, and decisions on its keys fail
	// at once with ErrUnavailable while the Limiter probes it (see
	// WithBreaker).
	BreakerOpen bool
	// BreakerOpens counts the times a breaker opened since New, every
	// node's on a Cluster or Ring: as a counter it shows an opening even if
	// the breaker closed again before a metrics scrape.
	BreakerOpens uint64
	// FailedSettlements counts the settlements (Settle, Release, and a
	// prefetch's give-back of events it did not use) that returned an
	// error from Redis or the engine since New: a timeout, a lost
	// connection, an open breaker (ErrUnavailable). An invalid cost or a
	// second settlement (ErrSettled) is not counted.
	FailedSettlements uint64
	// RetriedReleases counts the failed settlements whose Concurrency
	// slots the Limiter then freed in the background (a retried release
	// that Redis answered).
	RetriedReleases uint64
	// AbandonedReleases counts the failed settlements whose slots the
	// Limiter stopped trying to free: their lease ended first (it frees
	// them), the key held another type, or too many waited to be retried.
	AbandonedReleases uint64
}

// Stats returns the Limiter's counters. It is cheap and safe for
// concurrent use.
func (l *Limiter) Stats() Stats {
	l.engine.forgetting.Lock()
	defer l.engine.forgetting.Unlock()
	s := Stats{BreakerOpens: l.engine.goneOpens.Load(), FailedSettlements: l.releaser.failed.Load(),
		RetriedReleases: l.releaser.retried.Load(), AbandonedReleases: l.releaser.abandoned.Load()}
	l.engine.eachLane(func(ln *lane) {
		open := ln.breaker.open.Load()
		s.BreakerOpen = s.BreakerOpen || open
		s.BreakerOpens += ln.breaker.opens.Load() // after open: an open breaker's opening is counted
	})
	return s
}
