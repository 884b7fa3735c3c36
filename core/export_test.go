package core

import (
	"context"
	"strings"
	"time"
)

// Settings the tests read.
const (
	MaxCount             = maxCount
	MaxSlots             = maxSlots
	MinPeriod            = minPeriod
	DefaultBuckets       = defaultBuckets
	MaxKeyLen            = maxKeyLen
	MaxLimits            = 16
	BreakerMinFailures   = breakerMinFailures
	BreakerProbeInterval = breakerProbeInterval
	DefaultBatchSize     = defaultBatchSize
	DefaultBreakerAfter  = defaultBreakerAfter

	DefaultDenyCacheMaxAge = defaultDenyCacheMaxAge
)

// WithLocalClock sets the clock the deny cache reads when the scripts read
// the Redis server's, for tests whose server clock is fake (miniredis's
// SetTime): in production both run in real time.
func WithLocalClock(now func() time.Time) Option {
	return func(l *Limiter) { l.localClock = now }
}

// WithBatchSize sets the most decisions in one round trip; 1 turns
// batching off.
func WithBatchSize(n int) Option {
	return func(l *Limiter) { l.batch = max(1, n) }
}

// WithPipelines sets the most round trips in flight, and I/O goroutines.
func WithPipelines(n int) Option {
	return func(l *Limiter) { l.pipelines = max(1, n) }
}

// DecideEach is the decision the HTTP layer makes (bridge.Decide): limits
// each in its scope, with every limit's result in each.
func (l *Limiter) DecideEach(ctx context.Context, key string, scopes []string, limits []Limit, n int, each []Result) (Result, int, error) {
	return l.decide(ctx, key, scopes, limits, n, each)
}

// ResetScope resets the state key keeps under limit in scope.
func (l *Limiter) ResetScope(ctx context.Context, scope, key string, limit Limit) error {
	return l.reset(ctx, scope, key, limit)
}

// FormatLimits writes limits as ParseLimits reads them.
func FormatLimits(limits []Limit) string {
	parts := make([]string, len(limits))
	for i, l := range limits {
		parts[i] = l.String()
	}
	return strings.Join(parts, ", ")
}

// Senders returns how many sender goroutines the Limiter runs now.
func (l *Limiter) Senders() int {
	n := 0
	l.engine.eachLane(func(ln *lane) {
		ln.mu.Lock()
		n += ln.alive
		ln.mu.Unlock()
	})
	return n
}

// DenyCacheLen returns how many keys the deny cache holds.
func (l *Limiter) DenyCacheLen() int {
	if l.deny == nil {
		return 0
	}
	return l.deny.entries.Len()
}

// SetLinger changes how long the Limiter's idle senders wait before they
// stop, so tests of goroutine counts need not wait a second.
func (l *Limiter) SetLinger(d time.Duration) { l.engine.linger.Store(int64(d)) }

// Script returns the decision script of l and the ARGV it takes for a cost
// of 1 on the server's clock, no reservation, for benchmarks of the
// scripts alone.
func Script(l Limit) (src, sha string, argv []any) {
	info, err := infos.get(l)
	if err != nil {
		panic(err)
	}
	return info.d.script.src, info.d.script.sha, info.appendArgs([]any{"", "", 1}, time.Now())
}

// MixedScript returns the script that decides any mix of algorithms.
func MixedScript() (src, sha string) { return mixedScript.src, mixedScript.sha }

// IsBatchScript reports whether arg, an EVALSHA's or EVAL's first
// argument, is a batch script's SHA or source: every algorithm's, or one
// algorithm file's.
func IsBatchScript(arg any) bool {
	for _, s := range batchScripts {
		if arg == s.sha || arg == s.src {
			return true
		}
	}
	return false
}

// Queued returns how many decisions wait for a sender.
func (l *Limiter) Queued() int {
	n := 0
	l.engine.eachLane(func(ln *lane) {
		ln.mu.Lock()
		n += len(ln.queue)
		ln.mu.Unlock()
	})
	return n
}

// Local is FailLocal's in-process fallback, for tests.
type Local struct{ *localLimiter }

// NewLocal returns a fallback of at most keys states on the clock now,
// enforcing the whole of each limit.
func NewLocal(keys int, now func() time.Time) Local { return NewLocalShare(keys, 1, now) }

// NewLocalShare returns a fallback that enforces a share-th of each limit.
func NewLocalShare(keys, share int, now func() time.Time) Local {
	l := newLocalLimiter(keys, func() int { return share })
	l.now = now
	return Local{l}
}

// Peers returns how many instances the Limiter counted sharing its keys
// (0: none heard yet).
func (l *Limiter) Peers() int { return int(l.peers.count.Load()) }

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

// Size returns how many states the fallback keeps.
func (l Local) Size() int { return l.size() }

// WithFixedPrefetch makes every fetch ask for Prefetch events rather
// than adapt to the demand.
func WithFixedPrefetch() Option { return func(l *Limiter) { l.fixedPrefetch = true } }

// Held returns how many prefetched events the Limiter holds for key under
// limit (in scope ""), and whether it may still use them now.
func (l *Limiter) Held(key string, limit Limit) (int, bool) {
	info, err := infos.get(limit)
	if err != nil {
		return 0, false
	}
	v, ok := l.leases.Load(stateKey(l.prefix, "", key, info))
	if !ok {
		return 0, false
	}
	g := v.(*lease).g.Load()
	if g == nil {
		return 0, false
	}
	left := g.left.Load()
	return int(left), l.now().Before(g.deadline(left))
}

// Leases returns how many keys the Limiter keeps prefetch leases for.
func (l *Limiter) Leases() int {
	n := 0
	l.leases.Range(func(any, any) bool { n++; return true })
	return n
}

// SharePeers makes the Limiter count the instances that share its keys,
// as a FailLocal policy does.
func (l *Limiter) SharePeers() { l.peers.on.Store(true) }

// Lanes returns how many lanes of Cluster or Ring nodes the Limiter keeps.
func (l *Limiter) Lanes() int {
	n := 0
	l.engine.lanes.Range(func(any, any) bool { n++; return true })
	return n
}

// ReserveUpTo is ReserveEach whose limits with bit i of upTo set take up
// to their cost (bridge.ReserveEach); an allowed reservation writes what
// each took into costs.
func (l *Limiter) ReserveUpTo(ctx context.Context, key string, limits []Limit, costs []int, upTo uint32) (*Reservation, error) {
	r, _, err := l.reserve(ctx, key, nil, limits, 0, costs, upTo, nil)
	return r, err
}
