package core

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/transport"
)

// maxKeyLen is the longest key, in bytes, a Limiter accepts.
const maxKeyLen = 1024

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
type Limiter struct {
	prefix   string
	clock    func() time.Time // nil: the Redis server's
	timeout  time.Duration
	log      *slog.Logger
	tr       *transport.Transport
	deny     *denyCache  // nil: off
	infos    limitCache  // what each limit decided through l needs, worked out once (state.go)
	leases   sync.Map    // prefetched allowance: a decision's cache id -> *lease (prefetch.go)
	sweeping atomic.Bool // a goroutine sweeps leases
	peers    peers       // how many instances share the keys, for FailLocal (peers.go)
	loss     lossWatch   // whether Redis kept the state (loss.go)
	releaser releaser    // frees the slots of failed settlements and decisions (release.go)
	// fixedPrefetch and localClock: options' (tests')
	fixedPrefetch bool
	localClock    func() time.Time
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
	c := defaultOptions()
	for _, opt := range opts {
		opt(&c)
	}
	l := &Limiter{prefix: escapePrefix(c.prefix), clock: c.clock, timeout: max(0, c.timeout), log: c.log,
		fixedPrefetch: c.fixedPrefetch, localClock: c.localClock}
	if l.log == nil {
		l.log = slog.Default()
	}
	l.peers.id = l.nextID()
	l.loss.every = c.lossEvery
	l.loss.next.Store(time.Now().Add(c.lossEvery).UnixNano())
	l.tr = transport.New(rdb, transport.Config{Batch: c.batch, Senders: c.senders, BatchScript: c.batchScript,
		BreakerAfter: c.breakerAfter, Linger: c.linger, Log: l.log, ErrTimeout: ErrTimeout, ErrUnavailable: ErrUnavailable})
	if c.denyKeys > 0 && c.denyMaxAge > 0 {
		l.deny = newDenyCache(c.denyKeys, c.denyMaxAge)
	}
	return l
}

// Logger returns the logger the Limiter was given (WithLogger), or
// slog.Default() as New found it; nil for a nil or zero Limiter.
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
	d, err := l.Decide(ctx, &Request{Key: key, Limits: limits[:], N: n})
	return d.Result, err
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
	d, err := l.Decide(ctx, &Request{Key: key, Limits: limits, N: n})
	return d.Result, err
}

// Reset forgets the state of key under limit (its algorithm, variant and
// period), giving it its full allowance back, and makes this Limiter's deny
// cache forget every denial that involved it. Other limits' state for the
// same key is untouched. It is bounded like a decision.
func (l *Limiter) Reset(ctx context.Context, key string, limit Limit) error {
	return l.reset(ctx, "", key, limit)
}

// Stats returns the Limiter's counters. It is cheap and safe for
// concurrent use. A nil or zero Limiter's are all zero.
func (l *Limiter) Stats() Stats {
	if l.Validate() != nil {
		return Stats{}
	}
	s := Stats{FailedSettlements: l.releaser.failed.Load(), UnansweredReservations: l.releaser.unanswered.Load(),
		RetriedReleases: l.releaser.retried.Load(), AbandonedReleases: l.releaser.abandoned.Load()}
	t := l.tr.Stats()
	s.BreakerOpen, s.BreakerOpens = t.BreakerOpen, t.BreakerOpens
	s.StateLosses = l.loss.losses.Load()
	return s
}
