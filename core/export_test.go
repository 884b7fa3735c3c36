package core

import (
	"context"
	"strings"
	"time"

	"github.com/redlimit/redlimit/internal/wire"
)

// What core's tests read of its internals (as the standard library's
// export_test.go files do): nothing here is in the package a program
// imports.

// Settings the tests read.
const (
	MaxSlots               = maxMembers
	MinPeriod              = minPeriod
	DefaultBuckets         = defaultBuckets
	MaxKeyLen              = maxKeyLen
	DefaultBreakerAfter    = defaultBreakerAfter
	DefaultDenyCacheMaxAge = defaultDenyCacheMaxAge
	BreakerMinFailures     = 3                      // transport's breakerMinFailures
	BreakerProbeInterval   = 250 * time.Millisecond // transport's breakerProbeInterval
	DefaultBatchSize       = 128                    // transport's defaultBatch
)

// WithLocalClock sets the clock the deny cache reads when the scripts read
// the Redis server's, for tests whose server clock is fake (miniredis's
// SetTime): in production both run in real time.
func WithLocalClock(now func() time.Time) Option {
	return func(c *options) { c.localClock = now }
}

// WithBatchSize sets the most decisions in one round trip; 1 turns
// batching off.
func WithBatchSize(n int) Option {
	return func(c *options) { c.batch = max(1, n) }
}

// WithPipelines sets the most round trips in flight, and sender goroutines.
func WithPipelines(n int) Option {
	return func(c *options) { c.senders = max(1, n) }
}

// WithLinger sets how long an idle sender goroutine waits for work before
// it stops (a second by default), so that tests of goroutine counts need
// not wait a second.
func WithLinger(d time.Duration) Option {
	return func(c *options) { c.linger = d }
}

// WithFixedPrefetch makes every fetch ask for Prefetch events rather
// than adapt to the demand.
func WithFixedPrefetch() Option { return func(c *options) { c.fixedPrefetch = true } }

// DecideEach is the decision the HTTP layer makes: limits each in its
// scope, with every limit's result in each.
func (l *Limiter) DecideEach(ctx context.Context, key string, scopes []string, limits []Limit, n int, each []Result) (Result, int, error) {
	d, err := l.Decide(ctx, &Request{Key: key, Scopes: scopes, Limits: limits, N: n, Each: each})
	return d.Result, d.Binding, err
}

// ReserveUpTo is ReserveEach whose limits with bit i of upTo set take up
// to their cost (Request.TakeRest); an allowed reservation writes what
// each took into costs.
func (l *Limiter) ReserveUpTo(ctx context.Context, key string, limits []Limit, costs []int, upTo uint32) (*Reservation, error) {
	rest := make([]bool, len(limits))
	for i := range rest {
		rest[i] = upTo&(1<<i) != 0
	}
	d, err := l.Decide(ctx, &Request{Key: key, Limits: limits, Costs: costs, TakeRest: rest, Reserve: true})
	return d.Reservation, err
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
func (l *Limiter) Senders() int { return l.tr.Stats().Senders }

// Queued returns how many decisions wait for a sender.
func (l *Limiter) Queued() int { return l.tr.Stats().Queued }

// Lanes returns how many lanes of Cluster or Ring nodes the Limiter keeps.
func (l *Limiter) Lanes() int { return l.tr.Stats().Lanes }

// DenyCacheLen returns how many keys the deny cache holds.
func (l *Limiter) DenyCacheLen() int {
	if l.deny == nil {
		return 0
	}
	return l.deny.entries.Len()
}

// Leases returns how many keys the Limiter keeps prefetch leases for.
func (l *Limiter) Leases() int {
	n := 0
	l.leases.Range(func(any, any) bool { n++; return true })
	return n
}

// Peers returns how many instances the Limiter counted sharing its keys
// (0: none heard yet).
func (l *Limiter) Peers() int { return int(l.peers.count.Load()) }

// SharePeers makes the Limiter count the instances that share its keys,
// as a FailLocal policy does.
func (l *Limiter) SharePeers() { l.peers.on.Store(true) }

// Held returns how many prefetched events the Limiter holds for key under
// limit (in scope ""), and whether it may still use them now.
func (l *Limiter) Held(key string, limit Limit) (int, bool) {
	info, err := l.infos.get(limit)
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

// Script returns the script of l and the ARGV (after the keys) it takes
// for one decision of cost 1 on the server's clock, no reservation, for
// benchmarks of the scripts alone.
func Script(l Limit) (src, sha string, argv []any) {
	info, err := workOut(l)
	if err != nil {
		panic(err)
	}
	argv = wire.AppendLimit(wire.AppendDecision([]any{wire.Decide}, "", "", 0), 1, false)
	return info.d.script.Src, info.d.script.SHA, info.appendArgs(argv, time.Now())
}

// MixedScript returns the script that decides any mix of algorithms.
func MixedScript() (src, sha string) { return wire.All.Src, wire.All.SHA }

// IsBatch reports whether args, an EVALSHA's or EVAL's arguments (its
// name, the script, the key count, the keys, the ARGV: redis.Cmder's
// Args), are a batch of decisions or settlements in one script call.
func IsBatch(args []any) bool {
	if len(args) < 3 {
		return false
	}
	n, ok := args[2].(int)
	return ok && len(args) > 3+n && args[3+n] == wire.Batch
}

// BatchCalls returns how many decisions and settlements a batch's args
// (IsBatch) hold.
func BatchCalls(args []any) int {
	calls := 0
	for at := 4 + args[2].(int); at < len(args); at += 3 + args[at+2].(int) {
		calls++
	}
	return calls
}

// TestLocal is FailLocal's in-process fallback, for tests.
type TestLocal struct{ *Local }

// NewLocal returns a fallback of at most keys states on the clock now,
// enforcing the whole of each limit.
func NewLocal(keys int, now func() time.Time) TestLocal { return NewLocalShare(keys, 1, now) }

// NewLocalShare returns a fallback that enforces a share-th of each limit.
func NewLocalShare(keys, share int, now func() time.Time) TestLocal {
	return TestLocal{newLocal(keys, func() int { return share }, now, new(limitCache))}
}

// Allow decides n events under every limit as the fallback does.
func (l TestLocal) Allow(key string, scopes []string, limits []Limit, n int, each []Result) (Result, int) {
	d := l.Local.Decide(&Request{Key: key, Scopes: scopes, Limits: limits, N: n, Each: each})
	return d.Result, d.Binding
}

// AllowEach decides as the fallback does for ReserveEach: costs[i] under
// limits[i], taking up to it where upTo has the limit's bit.
func (l TestLocal) AllowEach(key string, limits []Limit, costs []int, upTo uint32, each []Result) (Result, int) {
	rest := make([]bool, len(limits))
	for i := range rest {
		rest[i] = upTo&(1<<i) != 0
	}
	d := l.Local.Decide(&Request{Key: key, Limits: limits, Costs: costs, TakeRest: rest, Each: each})
	return d.Result, d.Binding
}

// Size returns how many states the fallback keeps.
func (l TestLocal) Size() int { return l.size() }

// CheckLoss runs a check of every server's marker now, as the background
// does once per WithLossCheck, waiting for a running one to end first;
// it returns the markers' keys.
func (l *Limiter) CheckLoss() []string {
	for !l.loss.running.CompareAndSwap(false, true) {
		time.Sleep(time.Millisecond)
	}
	defer l.loss.running.Store(false)
	l.checkLoss()
	keys := make([]string, len(l.loss.markers))
	for i, m := range l.loss.markers {
		keys[i] = m.key
	}
	return keys
}

// IsLossCheck reports whether args are those of a script call of the loss
// check (an EVALSHA or EVAL of wire.Generation), which test hooks that
// count decisions leave out.
func IsLossCheck(args []any) bool {
	return len(args) > 1 && (args[1] == wire.Generation.SHA || args[1] == wire.Generation.Src)
}
