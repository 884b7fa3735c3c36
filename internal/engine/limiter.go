package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultTimeout bounds each decision unless Config.Timeout says
// otherwise (core.DefaultTimeout).
const DefaultTimeout = 100 * time.Millisecond

// maxKeyLen is the longest key, in bytes, a Limiter accepts.
const maxKeyLen = 1024

// Config is what core's options set, read by New. DefaultConfig returns
// the defaults; core.With... documents each field.
type Config struct {
	Prefix       string
	Clock        func() time.Time // nil: the Redis server's
	Timeout      time.Duration
	Log          *slog.Logger // nil: slog.Default() when New runs
	BatchScript  bool
	BreakerAfter time.Duration
	DenyKeys     int
	DenyMaxAge   time.Duration

	// Only tests and benchmarks set these: the most calls in one round
	// trip and round trips in flight per lane; the clock the deny cache
	// reads when the scripts read the Redis server's (a fake server clock);
	// and FixedPrefetch, which makes every fetch ask for Prefetch events
	// rather than adapt.
	Batch, Pipelines int
	LocalClock       func() time.Time
	FixedPrefetch    bool
}

// DefaultConfig returns a Limiter's defaults.
func DefaultConfig() Config {
	return Config{Prefix: "redlimit:", Timeout: DefaultTimeout, BatchScript: true,
		Batch: defaultBatchSize, Pipelines: defaultPipelines, BreakerAfter: defaultBreakerAfter,
		DenyKeys: DefaultDenyCacheKeys, DenyMaxAge: defaultDenyCacheMaxAge}
}

// Limiter is core.Limiter: it makes rate-limit decisions, each one atomic
// Lua script on Redis. It is safe for concurrent use; the zero Limiter's
// methods return an error.
type Limiter struct {
	prefix   string
	clock    func() time.Time // nil: the Redis server's
	timeout  time.Duration
	log      *slog.Logger
	carrier  *carrier
	deny     *denyCache  // nil: off
	leases   sync.Map    // prefetched allowance: a decision's cache id -> *lease (prefetch.go)
	sweeping atomic.Bool // a goroutine sweeps leases
	peers    peers       // how many instances share the keys, for FailLocal (peers.go)
	releaser releaser    // frees the slots of failed settlements (release.go)
	// fixedPrefetch and localClock: Config's
	fixedPrefetch bool
	localClock    func() time.Time
}

// New returns a Limiter that runs its scripts on rdb with the settings c.
// It does no I/O and starts no goroutine. It panics if rdb is nil.
func New(rdb redis.Scripter, c Config) *Limiter {
	if rdb == nil {
		panic("redlimit: core.New: nil redis client")
	}
	l := &Limiter{prefix: escapePrefix(c.Prefix), clock: c.Clock, timeout: max(0, c.Timeout), log: c.Log,
		fixedPrefetch: c.FixedPrefetch, localClock: c.LocalClock}
	if l.log == nil {
		l.log = slog.Default()
	}
	l.peers.id = l.nextID()
	l.carrier = newCarrier(rdb, max(1, c.Batch), max(1, c.Pipelines), c.BatchScript, max(0, c.BreakerAfter), l.log)
	if c.DenyKeys > 0 && c.DenyMaxAge > 0 {
		l.deny = newDenyCache(c.DenyKeys, c.DenyMaxAge)
	}
	return l
}

// Ready reports whether l was made by New. A nil or zero Limiter is not:
// every decision on it is an error, so the HTTP and gRPC layers refuse it
// when they are handed one (NotReady says how).
func (l *Limiter) Ready() bool { return l != nil && l.carrier != nil }

// NotReady is the error of a nil or zero Limiter handed to who (a
// function's name, "redlimit.NewPolicy"): it says how to make one.
func NotReady(who string) error {
	return fmt.Errorf("%s: the *core.Limiter is nil or a zero core.Limiter{}, which cannot decide anything: create it with core.New(rdb)", who)
}

// Logger returns the logger the Limiter was given (core.WithLogger); nil
// for a nil or zero Limiter.
func (l *Limiter) Logger() *slog.Logger {
	if l == nil {
		return nil
	}
	return l.log
}

// Allow is AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.AllowN(ctx, key, limit, 1)
}

// AllowN is core.Limiter.AllowN: n events for key under limit, all or
// nothing.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	limits := [1]Limit{limit}
	res, _, _, err := l.Decide(ctx, &Request{Key: key, Limits: limits[:], N: n})
	return res, err
}

// AllowAll is core.Limiter.AllowAll: n events for key under every limit,
// all or nothing.
func (l *Limiter) AllowAll(ctx context.Context, key string, limits []Limit, n int) (Result, error) {
	res, _, _, err := l.Decide(ctx, &Request{Key: key, Limits: limits, N: n})
	return res, err
}

// Reset is core.Limiter.Reset: it forgets the state of key under limit in
// scope ("" for core's).
func (l *Limiter) Reset(ctx context.Context, scope, key string, limit Limit) error {
	return l.reset(ctx, scope, key, limit)
}

// Stats are core.Stats: a Limiter's counters, each from 0 at New.
type Stats struct {
	BreakerOpen            bool   // a breaker is open now
	BreakerOpens           uint64 // breakers opened, every node's
	FailedSettlements      uint64 // settlements that returned an error from Redis or the engine
	UnansweredReservations uint64 // reserving decisions of Concurrency limits that failed after they may have reached Redis
	RetriedReleases        uint64 // failed settlements and decisions whose slots were freed in the background
	AbandonedReleases      uint64 // failed settlements and decisions whose slots were left to their lease
}

// Stats returns the Limiter's counters. It is cheap and safe for
// concurrent use. A nil or zero Limiter's are all zero.
func (l *Limiter) Stats() Stats {
	if !l.Ready() {
		return Stats{}
	}
	l.carrier.forgetting.Lock()
	defer l.carrier.forgetting.Unlock()
	s := Stats{BreakerOpens: l.carrier.goneOpens.Load(), FailedSettlements: l.releaser.failed.Load(),
		UnansweredReservations: l.releaser.unanswered.Load(),
		RetriedReleases:        l.releaser.retried.Load(), AbandonedReleases: l.releaser.abandoned.Load()}
	l.carrier.eachLane(func(ln *lane) {
		open := ln.breaker.open.Load()
		s.BreakerOpen = s.BreakerOpen || open
		s.BreakerOpens += ln.breaker.opens.Load() // after open: an open breaker's opening is counted
	})
	return s
}
