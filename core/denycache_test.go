package core_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// denyWorld is a real Redis seen through a client whose script calls are
// counted, and Limiters on a fake clock.
type denyWorld struct {
	rdb    *redis.Client
	trips  *roundTrips
	clock  *fakeClock
	prefix string
}

func newDenyWorld(t *testing.T, srv *redistest.Server) *denyWorld {
	rdb := srv.Client(t)
	h := &roundTrips{}
	rdb.AddHook(h)
	return &denyWorld{rdb: rdb, trips: h, clock: &fakeClock{now: t0}, prefix: uniquePrefix()}
}

func (w *denyWorld) limiter(opts ...core.Option) *core.Limiter {
	return core.New(w.rdb, append([]core.Option{patient, core.WithPrefix(w.prefix), core.WithClock(w.clock.Now)}, opts...)...)
}

// sent returns how many scripts reached Redis since the last call.
func (w *denyWorld) sent() int64 {
	n := w.trips.decisions.Load()
	w.trips.reset()
	return n
}

// TestDenyCache: a denied key is answered in process, counting down to
// the instant Redis promised, and asked again from that instant on.
func TestDenyCache(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	for _, a := range suiteAlgorithms {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			w := newDenyWorld(t, srv)
			// A max age beyond RetryAfter: the cache answers up to the
			// instant Redis promised.
			lim, l := w.limiter(core.WithDenyCacheMaxAge(24*time.Hour)), a.limit
			drain(t, lim, "k", l)
			denied := allowN(t, lim, "k", l, 1)
			check(t, "denied by Redis", denied, false, 0)
			if denied.Cached {
				t.Fatal("Redis's own denial is marked Cached")
			}
			w.sent()
			for _, step := range []time.Duration{0, time.Microsecond, denied.RetryAfter/2 - time.Microsecond} {
				w.clock.Advance(step)
				res := allowN(t, lim, "k", l, 1)
				if !res.Cached || res.Allowed || res.Limit != l {
					t.Fatalf("denied key asked again: %+v, want a cached denial", res)
				}
				// The denial was made at t0: the clock had not moved yet.
				if want := denied.RetryAfter - w.clock.Now().Sub(t0); res.RetryAfter != want {
					t.Fatalf("cached RetryAfter %v, want %v (counting down)", res.RetryAfter, want)
				}
			}
			if n := w.sent(); n != 0 {
				t.Fatalf("%d scripts sent for a key that is answered locally", n)
			}
			// One microsecond before the promise it is still denied, from
			// the cache; at it Redis is asked and allows.
			w.clock.Advance(denied.RetryAfter - denied.RetryAfter/2 - time.Microsecond)
			if res := allowN(t, lim, "k", l, 1); res.Allowed || !res.Cached || res.RetryAfter != time.Microsecond {
				t.Fatalf("1µs before RetryAfter: %+v, want a cached denial for 1µs more", res)
			}
			if n := w.sent(); n != 0 {
				t.Fatalf("%d scripts sent for a key that is answered locally", n)
			}
			w.clock.Advance(time.Microsecond)
			if res := allowN(t, lim, "k", l, 1); !res.Allowed || res.Cached {
				t.Fatalf("at RetryAfter: %+v, want allowed by Redis", res)
			}
		})
	}
}

// TestDenyCacheSubMicrosecond: the scripts see whole microseconds; a
// cached denial must not outlive Redis's by the fraction the clock had.
func TestDenyCacheSubMicrosecond(t *testing.T) {
	t.Parallel()
	w := newDenyWorld(t, redistest.Standalone(t))
	w.clock.now = t0.Add(700 * time.Nanosecond)
	lim, l := w.limiter(), core.PerSecond(1)
	allowN(t, lim, "k", l, 1)
	denied := allowN(t, lim, "k", l, 1)
	w.clock.Advance(denied.RetryAfter - 700*time.Nanosecond) // Redis's instant, to the microsecond
	if res := allowN(t, lim, "k", l, 1); !res.Allowed {
		t.Fatalf("at the microsecond Redis promised: %+v", res)
	}
}

// TestDenyCacheCosts: a denial of cost n answers n and more; less goes to
// Redis, which may allow it; a peek and a cost above the burst never use
// the cache.
func TestDenyCacheCosts(t *testing.T) {
	t.Parallel()
	w := newDenyWorld(t, redistest.Standalone(t))
	lim, l := w.limiter(), core.PerHour(10)
	allowN(t, lim, "k", l, 8)
	check(t, "3 with 2 left", allowN(t, lim, "k", l, 3), false, 2)
	for _, n := range []int{3, 5} {
		if res := allowN(t, lim, "k", l, n); !res.Cached || res.Allowed || res.Remaining != 2 {
			t.Fatalf("cost %d after cost 3 was denied: %+v, want cached, Remaining 2", n, res)
		}
	}
	for _, n := range []int{0, 11} {
		if res := allowN(t, lim, "k", l, n); res.Cached {
			t.Fatalf("cost %d answered from the cache: %+v", n, res)
		}
	}
	check(t, "2 with 2 left", allowN(t, lim, "k", l, 2), true, 0)
}

// TestDenyCacheResetAndLimitChange: Reset through the same Limiter and a
// changed limit never see a stale denial.
func TestDenyCacheResetAndLimitChange(t *testing.T) {
	t.Parallel()
	w := newDenyWorld(t, redistest.Standalone(t))
	lim, l := w.limiter(), core.PerHour(2)
	drain(t, lim, "k", l)
	check(t, "denied", allowN(t, lim, "k", l, 1), false, 0)
	if err := lim.Reset(context.Background(), "k", l); err != nil {
		t.Fatal(err)
	}
	check(t, "after Reset", allowN(t, lim, "k", l, 1), true, 1)

	drain(t, lim, "j", l)
	check(t, "denied", allowN(t, lim, "j", l, 1), false, 0)
	raised := l
	raised.Burst = 10
	if res := allowN(t, lim, "j", raised, 1); !res.Allowed || res.Cached {
		t.Fatalf("a raised burst got %+v, want allowed by Redis", res)
	}
}

// TestDenyCacheMaxAge: a Reset through another Limiter reaches this one's
// cached denial within the max age, and not before.
func TestDenyCacheMaxAge(t *testing.T) {
	t.Parallel()
	w := newDenyWorld(t, redistest.Standalone(t))
	a, b := w.limiter(core.WithDenyCacheMaxAge(time.Second)), w.limiter()
	l := core.PerHour(1)
	allowN(t, a, "k", l, 1)
	check(t, "denied", allowN(t, a, "k", l, 1), false, 0)
	if err := b.Reset(context.Background(), "k", l); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(time.Second - time.Microsecond)
	if res := allowN(t, a, "k", l, 1); !res.Cached {
		t.Fatalf("within the max age: %+v, want the cached denial (the documented staleness)", res)
	}
	w.clock.Advance(time.Microsecond)
	if res := allowN(t, a, "k", l, 1); !res.Allowed {
		t.Fatalf("after the max age: %+v, want Redis's answer after the other Limiter's Reset", res)
	}
}

// TestDenyCacheBoundsAndOff: the cache holds at most its size; 0 keys or a
// max age of 0 turn it off.
func TestDenyCacheBoundsAndOff(t *testing.T) {
	t.Parallel()
	w := newDenyWorld(t, redistest.Standalone(t))
	l := core.PerHour(1)
	small := w.limiter(core.WithDenyCache(8))
	for i := 0; i < 20; i++ {
		key := fmt.Sprint("k", i)
		allowN(t, small, key, l, 1)
		allowN(t, small, key, l, 1)
	}
	if n := small.DenyCacheLen(); n != 8 {
		t.Fatalf("the cache holds %d keys, want its size 8", n)
	}
	if res := allowN(t, small, "k19", l, 1); !res.Cached {
		t.Fatalf("the latest denial is not cached: %+v", res)
	}
	if res := allowN(t, small, "k0", l, 1); res.Cached {
		t.Fatalf("the oldest denial is still cached: %+v", res)
	}
	for _, opt := range []core.Option{core.WithDenyCache(0), core.WithDenyCacheMaxAge(0)} {
		off := w.limiter(opt)
		for i := 0; i < 3; i++ {
			if res := allowN(t, off, "k1", l, 1); res.Cached {
				t.Fatalf("cache off: %+v", res)
			}
		}
		if n := off.DenyCacheLen(); n != 0 {
			t.Fatalf("cache off holds %d keys", n)
		}
	}
}

// TestDenyCacheFlood: many goroutines on a denied key cost Redis one
// decision, not one each.
func TestDenyCacheFlood(t *testing.T) {
	t.Parallel()
	w := newDenyWorld(t, redistest.Standalone(t))
	lim, l := w.limiter(), core.PerHour(5)
	drain(t, lim, "hot", l)
	w.sent()
	if allowed := hammer(t, lim, 32, 100, l, func(int, int) string { return "hot" }); allowed != 0 {
		t.Fatalf("%d allowed on a drained key", allowed)
	}
	if n := w.sent(); n > 32 {
		t.Fatalf("3200 decisions on a denied key sent %d scripts; want the first denial's few", n)
	}
}

// TestDenyCacheEntrySize measures the memory an entry takes, which the
// DefaultDenyCacheKeys documentation quotes. It runs alone (no
// t.Parallel), but the heap it reads is the process's, where earlier
// tests' goroutines may still free memory: it measures three times, on
// fresh keys, and takes the median.
func TestDenyCacheEntrySize(t *testing.T) {
	m := miniredis.RunT(t)
	clock := &fakeClock{now: t0}
	lim := core.New(redis.NewClient(&redis.Options{Addr: m.Addr()}), core.WithClock(clock.Now), patient)
	const n = 2000
	l := core.PerHour(1)
	var per []float64
	for round := range 3 {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("user:%d:%032d", round, i) // a 40-byte identity
			allowN(t, lim, keys[i], l, 1)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for _, k := range keys {
			allowN(t, lim, k, l, 1)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if got := lim.DenyCacheLen(); got != n*(round+1) {
			t.Fatalf("%d entries, want %d", got, n*(round+1))
		}
		per = append(per, (float64(after.HeapAlloc)-float64(before.HeapAlloc))/n)
	}
	slices.Sort(per)
	t.Logf("%.0f bytes per deny cache entry (40-byte identity; rounds %.0f)", per[1], per)
	if per[1] <= 0 || per[1] > 600 {
		t.Errorf("%.0f bytes per entry; docs/engine.md says about 500–550", per[1])
	}
}

// holdHook is a go-redis hook that holds the first command matching
// `match`: before sending it, or after Redis ran it (holding its reply),
// until release is closed. reached is closed when it holds.
type holdHook struct {
	match   func(args []any) bool
	after   bool // hold the reply, not the command
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func newHoldHook(after bool, match func(args []any) bool) *holdHook {
	return &holdHook{match: match, after: after, reached: make(chan struct{}), release: make(chan struct{})}
}

func (h *holdHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		held := false
		if h.match(cmd.Args()) {
			h.once.Do(func() { held = true })
		}
		if held && !h.after {
			close(h.reached)
			<-h.release
		}
		err := next(ctx, cmd)
		if held && h.after {
			close(h.reached)
			<-h.release
		}
		return err
	}
}

// isDecision and isReset tell the Limiter's scripts apart by their
// arguments: a reset has a key and no ARGV.
func isDecision(args []any) bool { return args[0] == "evalsha" && len(args) > 4 }
func isReset(args []any) bool    { return args[0] == "evalsha" && len(args) == 4 }

// TestDenyCacheResetInFlight: a denial decided on state that a Reset
// through the same Limiter removes is not remembered, whichever of the two
// is in flight while the other runs.
func TestDenyCacheResetInFlight(t *testing.T) {
	t.Parallel()
	l := core.PerHour(1)
	ctx := context.Background()
	setup := func(t *testing.T, hook *holdHook) *core.Limiter {
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		allowN(t, core.New(rdb, patient), "k", l, 1) // drained
		held := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { held.Close() })
		held.AddHook(hook)
		return core.New(held, patient, core.WithBatchSize(1))
	}
	afterReset := func(t *testing.T, lim *core.Limiter) {
		if res := allowN(t, lim, "k", l, 1); !res.Allowed || res.Cached {
			t.Fatalf("after the Reset: %+v; a denial of the state it removed was remembered", res)
		}
	}

	t.Run("reply held across the reset", func(t *testing.T) {
		hook := newHoldHook(true, isDecision)
		lim := setup(t, hook)
		denied := make(chan core.Result)
		go func() {
			res, _ := lim.Allow(ctx, "k", l)
			denied <- res
		}()
		<-hook.reached // Redis has denied; the reply is held
		if err := lim.Reset(ctx, "k", l); err != nil {
			t.Fatal(err)
		}
		close(hook.release)
		if res := <-denied; res.Allowed {
			t.Fatalf("the held decision: %+v, want the denial from before the Reset", res)
		}
		afterReset(t, lim)
	})

	t.Run("decided while the reset is on its way", func(t *testing.T) {
		hook := newHoldHook(false, isReset)
		lim := setup(t, hook)
		reset := make(chan error)
		go func() { reset <- lim.Reset(ctx, "k", l) }()
		<-hook.reached // the Reset has begun; its DEL is not sent yet
		if res := allowN(t, lim, "k", l, 1); res.Allowed {
			t.Fatalf("before the DEL: %+v, want denied", res)
		}
		close(hook.release)
		if err := <-reset; err != nil {
			t.Fatal(err)
		}
		afterReset(t, lim)
	})
}

// TestDenyCacheRefresh: past the max age, one caller refreshes a denial
// while every other keeps the cached answer, so a flood on a denied key
// sends Redis one decision per max age, not one per waiting caller. A
// refresh that finds the key allowed drops the entry; one that fails
// leaves it to everyone again after another max age.
func TestDenyCacheRefresh(t *testing.T) {
	t.Parallel()
	l := core.PerHour(1)
	ctx := context.Background()
	r := newRefreshWorld(t, l, core.WithTimeout(time.Second))
	m, lim, hook, trips, clock := r.m, r.lim, r.hook, r.trips, r.clock

	// Past the max age: the first caller refreshes (its reply held), the
	// flood keeps the cached answer.
	clock.Advance(core.DefaultDenyCacheMaxAge)
	trips.reset()
	close(r.armed)
	refreshed := make(chan core.Result)
	go func() {
		res, _ := lim.Allow(ctx, "k", l)
		refreshed <- res
	}()
	<-hook.reached
	for i := 0; i < 50; i++ {
		if res := allowN(t, lim, "k", l, 1); !res.Cached || res.Allowed {
			t.Fatalf("request %d while the refresh is in flight: %+v, want the cached denial", i, res)
		}
	}
	close(hook.release)
	if res := <-refreshed; res.Allowed || res.Cached {
		t.Fatalf("the refresh: %+v, want Redis's denial", res)
	}
	if n := trips.decisions.Load(); n != 1 {
		t.Fatalf("%d decisions reached Redis during the flood, want the one refresh", n)
	}
	if res := allowN(t, lim, "k", l, 1); !res.Cached {
		t.Fatalf("after the refresh: %+v, want the renewed cached denial", res)
	}

	// Reset elsewhere: the next refresh finds the key allowed and drops the
	// entry, so nobody keeps the stale denial.
	other := core.New(redis.NewClient(&redis.Options{Addr: m.Addr()}), patient)
	if err := other.Reset(ctx, "k", l); err != nil {
		t.Fatal(err)
	}
	clock.Advance(core.DefaultDenyCacheMaxAge)
	if res := allowN(t, lim, "k", l, 1); !res.Allowed {
		t.Fatalf("the refresh after a Reset elsewhere: %+v, want allowed", res)
	}
	if res := allowN(t, lim, "k", l, 1); res.Cached || res.Allowed {
		t.Fatalf("after the refresh was allowed: %+v, want a fresh denial from Redis", res)
	}
}

// refreshWorld is a Limiter on a fake clock, whose client counts its
// scripts and, once armed is closed, holds the first decision's reply; key
// "k" is denied under the limit, and cached.
type refreshWorld struct {
	m     *miniredis.Miniredis
	lim   *core.Limiter
	hook  *holdHook
	armed chan struct{}
	trips *roundTrips
	clock *fakeClock
}

func newRefreshWorld(t *testing.T, l core.Limit, opts ...core.Option) *refreshWorld {
	r := &refreshWorld{m: miniredis.RunT(t), hook: newHoldHook(true, isDecision), armed: make(chan struct{}),
		trips: &roundTrips{}, clock: &fakeClock{now: t0}}
	rdb := redis.NewClient(&redis.Options{Addr: r.m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(r.trips)
	rdb.AddHook(&gate{armed: r.armed, next: r.hook})
	r.lim = core.New(rdb, append([]core.Option{core.WithClock(r.clock.Now)}, opts...)...)
	allowN(t, r.lim, "k", l, 1)
	check(t, "denied", allowN(t, r.lim, "k", l, 1), false, 0)
	return r
}

// gate passes commands straight on until armed is closed, then through
// next's ProcessHook.
type gate struct {
	armed chan struct{}
	next  redis.Hook
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	held := g.next.ProcessHook(next)
	return func(ctx context.Context, cmd redis.Cmder) error {
		select {
		case <-g.armed:
			return held(ctx, cmd)
		default:
			return next(ctx, cmd)
		}
	}
}

// TestDenyCacheRefreshFails: a refresh that fails (here, times out) keeps
// the cached denial for the others at most one more max age; then every
// caller asks Redis.
func TestDenyCacheRefreshFails(t *testing.T) {
	t.Parallel()
	l := core.PerHour(1)
	ctx := context.Background()
	r := newRefreshWorld(t, l, core.WithTimeout(50*time.Millisecond), core.WithBreaker(0))
	lim, clock := r.lim, r.clock
	t.Cleanup(func() { close(r.hook.release) })
	clock.Advance(core.DefaultDenyCacheMaxAge)
	close(r.armed)
	if _, err := lim.Allow(ctx, "k", l); !errors.Is(err, core.ErrTimeout) {
		t.Fatalf("the held refresh: %v, want a timeout", err)
	}
	clock.Advance(core.DefaultDenyCacheMaxAge - time.Microsecond)
	if res := allowN(t, lim, "k", l, 1); !res.Cached {
		t.Fatalf("within a max age of the failed refresh: %+v, want the cached denial", res)
	}
	clock.Advance(time.Microsecond)
	if res := allowN(t, lim, "k", l, 1); res.Cached {
		t.Fatalf("a max age after the failed refresh: %+v, want Redis's answer", res)
	}
}
