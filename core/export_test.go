package core

import (
	"context"
	"strings"
	"time"

	"github.com/redlimit/redlimit/internal/engine"
)

// Settings the tests read.
const (
	MaxCount             = engine.MaxCount
	MaxSlots             = engine.MaxMembers
	MinPeriod            = engine.MinPeriod
	DefaultBuckets       = engine.DefaultBuckets
	MaxKeyLen            = engine.MaxKeyLen
	MaxLimits            = engine.MaxLimits
	BreakerMinFailures   = engine.BreakerMinFailures
	BreakerProbeInterval = engine.BreakerProbeInterval
	DefaultBatchSize     = engine.DefaultBatchSize
	DefaultBreakerAfter  = engine.DefaultBreakerAfter

	DefaultDenyCacheMaxAge = engine.DefaultDenyCacheMaxAge
)

// WithLocalClock sets the clock the deny cache reads when the scripts read
// the Redis server's, for tests whose server clock is fake (miniredis's
// SetTime): in production both run in real time.
func WithLocalClock(now func() time.Time) Option {
	return func(c *options) { c.LocalClock = now }
}

// WithBatchSize sets the most decisions in one round trip; 1 turns
// batching off.
func WithBatchSize(n int) Option {
	return func(c *options) { c.Batch = max(1, n) }
}

// WithPipelines sets the most round trips in flight, and I/O goroutines.
func WithPipelines(n int) Option {
	return func(c *options) { c.Pipelines = max(1, n) }
}

// WithFixedPrefetch makes every fetch ask for Prefetch events rather
// than adapt to the demand.
func WithFixedPrefetch() Option { return func(c *options) { c.FixedPrefetch = true } }

// DecideEach is the decision the HTTP layer makes (engine.Request): limits
// each in its scope, with every limit's result in each.
func (l *Limiter) DecideEach(ctx context.Context, key string, scopes []string, limits []Limit, n int, each []Result) (Result, int, error) {
	var buf [engine.MaxLimits]engine.Limit
	results := make([]engine.Result, len(limits))
	res, i, _, err := l.e().Decide(ctx, &engine.Request{Key: key, Scopes: scopes, Limits: convert(limits, &buf), N: n, Each: results})
	for j := 0; j < len(each) && j < len(limits); j++ {
		each[j] = result(results[j])
	}
	return result(res), i, err
}

// ReserveUpTo is ReserveEach whose limits with bit i of upTo set take up
// to their cost (engine.Request.UpTo); an allowed reservation writes what
// each took into costs.
func (l *Limiter) ReserveUpTo(ctx context.Context, key string, limits []Limit, costs []int, upTo uint32) (*Reservation, error) {
	var buf [engine.MaxLimits]engine.Limit
	_, _, r, err := l.e().Decide(ctx, &engine.Request{Key: key, Limits: convert(limits, &buf), Costs: costs, UpTo: upTo, Reserve: true})
	return (*Reservation)(r), err
}

// ResetScope resets the state key keeps under limit in scope.
func (l *Limiter) ResetScope(ctx context.Context, scope, key string, limit Limit) error {
	return l.e().Reset(ctx, scope, key, engine.Limit(limit))
}

// FormatLimits writes limits as ParseLimits reads them.
func FormatLimits(limits []Limit) string {
	parts := make([]string, len(limits))
	for i, l := range limits {
		parts[i] = l.String()
	}
	return strings.Join(parts, ", ")
}

// What the engine tells its tests of a Limiter.
func (l *Limiter) Senders() int              { return l.e().Senders() }
func (l *Limiter) Queued() int               { return l.e().Queued() }
func (l *Limiter) Lanes() int                { return l.e().Lanes() }
func (l *Limiter) SetLinger(d time.Duration) { l.e().SetLinger(d) }
func (l *Limiter) DenyCacheLen() int         { return l.e().DenyCacheLen() }
func (l *Limiter) Leases() int               { return l.e().Leases() }
func (l *Limiter) Peers() int                { return l.e().Peers() }
func (l *Limiter) SharePeers()               { l.e().SharePeers() }
func (l *Limiter) Held(key string, limit Limit) (int, bool) {
	return l.e().Held(key, engine.Limit(limit))
}

// Script returns the decision script of l and the ARGV it takes for a cost
// of 1 on the server's clock, no reservation, for benchmarks of the
// scripts alone.
func Script(l Limit) (src, sha string, argv []any) { return engine.Script(engine.Limit(l)) }

// MixedScript returns the script that decides any mix of algorithms.
func MixedScript() (src, sha string) { return engine.MixedScript() }

// IsBatchScript reports whether arg, an EVALSHA's or EVAL's first
// argument, is a batch script's SHA or source.
func IsBatchScript(arg any) bool { return engine.IsBatchScript(arg) }

// Local is FailLocal's in-process fallback, for tests.
type Local struct{ *engine.Local }

// NewLocal returns a fallback of at most keys states on the clock now,
// enforcing the whole of each limit.
func NewLocal(keys int, now func() time.Time) Local { return NewLocalShare(keys, 1, now) }

// NewLocalShare returns a fallback that enforces a share-th of each limit.
func NewLocalShare(keys, share int, now func() time.Time) Local {
	return Local{engine.NewLocal(keys, func() int { return share }, now)}
}

// Allow decides n events under every limit as the fallback does.
func (l Local) Allow(key string, scopes []string, limits []Limit, n int, each []Result) (Result, int) {
	costs := make([]int, len(limits))
	for i := range costs {
		costs[i] = n
	}
	return l.allow(key, scopes, limits, costs, 0, each)
}

// AllowEach decides as the fallback does for ReserveEach: costs[i] under
// limits[i], taking up to it where upTo has the limit's bit.
func (l Local) AllowEach(key string, limits []Limit, costs []int, upTo uint32, each []Result) (Result, int) {
	return l.allow(key, nil, limits, costs, upTo, each)
}

func (l Local) allow(key string, scopes []string, limits []Limit, costs []int, upTo uint32, each []Result) (Result, int) {
	var buf [engine.MaxLimits]engine.Limit
	results := make([]engine.Result, len(limits))
	res, i := l.Local.Allow(key, scopes, convert(limits, &buf), costs, upTo, results)
	for j := 0; j < len(each) && j < len(limits); j++ {
		each[j] = result(results[j])
	}
	return result(res), i
}
