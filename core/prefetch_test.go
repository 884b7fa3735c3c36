package core_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// TestPrefetchParse: the grammar reads prefetch=N and String writes it
// back; the algorithms whose events may not be admitted later than they
// are counted refuse it, as do values above the capacity.
func TestPrefetchParse(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]core.Limit{
		"100/s prefetch=10":                         {Rate: 100, Period: time.Second, Prefetch: 10},
		"100/s token_bucket burst=200 prefetch=200": {Algorithm: core.TokenBucket, Rate: 100, Period: time.Second, Burst: 200, Prefetch: 200},
		"1000/h fixed_window prefetch=50":           {Algorithm: core.FixedWindow, Rate: 1000, Period: time.Hour, Prefetch: 50},
		"1000/d calendar prefetch=5":                {Algorithm: core.FixedWindow, Rate: 1000, Period: 24 * time.Hour, Calendar: "UTC", Prefetch: 5},
	} {
		l, err := core.ParseLimit(in)
		if err != nil || l != want {
			t.Fatalf("ParseLimit(%q) = %+v, %v; want %+v", in, l, err, want)
		}
		if back, err := core.ParseLimit(l.String()); err != nil || back != l {
			t.Fatalf("%q: String %q reads back as %+v, %v", in, l.String(), back, err)
		}
	}
	for in, why := range map[string]string{
		"100/s sliding_log prefetch=5":          "prefetch is a fixed_window or gcra or token_bucket setting, not sliding_log",
		"100/s sliding_window prefetch=5":       "not sliding_window",
		"100/s leaky_bucket prefetch=5":         "not leaky_bucket",
		"100/s token_bucket stepped prefetch=5": "prefetch does not go with stepped or shape",
		"10 concurrent prefetch=5":              "not concurrency",
		"100/s prefetch=101":                    "prefetch 101 is above the 100 events that can pass at once",
		"100/s prefetch=0x":                     "prefetch",
		"100/s prefetch=5 prefetch=6":           "prefetch given twice",
	} {
		if _, err := core.ParseLimit(in); !errors.Is(err, core.ErrInvalidLimit) || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseLimit(%q): %v; want ErrInvalidLimit saying %q", in, err, why)
		}
	}
	if err := (core.Limit{Rate: 10, Period: time.Second, Prefetch: -1}).Validate(); !errors.Is(err, core.ErrInvalidLimit) {
		t.Errorf("Prefetch -1: %v, want ErrInvalidLimit", err)
	}
}

// fixed returns a Limiter of w whose fetches take Prefetch events each.
func fixed(w *world) *core.Limiter {
	return core.New(w.newClient(), append(w.opts[:len(w.opts):len(w.opts)], core.WithFixedPrefetch())...)
}

// admission is one allowed decision of a simulation: when, and how many.
type admission struct {
	at time.Time
	n  int
}

// conforms replays admissions (in the order they were made) through an
// exact model of l without prefetch, and returns the first that the model
// would have denied, or -1.
func conforms(l core.Limit, admissions []admission) int {
	switch l.Algorithm {
	case core.FixedWindow:
		var start time.Time
		count := 0
		for i, a := range admissions {
			if start.IsZero() || !a.at.Before(start.Add(l.Period)) {
				start, count = a.at, 0
			}
			if count += a.n; count > l.Rate {
				return i
			}
		}
	case core.TokenBucket: // credit in units of 1/(rate) µs-tokens: exact
		per, rate := l.Period.Microseconds(), int64(l.Rate)
		full := int64(l.Capacity()) * per
		credit, last := full, time.Time{}
		for i, a := range admissions {
			if !last.IsZero() {
				credit = min(full, credit+a.at.Sub(last).Microseconds()*rate)
			}
			last = a.at
			if credit -= int64(a.n) * per; credit < 0 {
				return i
			}
		}
	default: // GCRA, its interval rounded up to a µs as the script's
		per, rate := l.Period.Microseconds(), int64(l.Rate)
		interval := (per + rate - 1) / rate
		span := int64(l.Capacity()) * interval
		var tat int64
		for i, a := range admissions {
			now := a.at.UnixMicro()
			tat = max(tat, now) + int64(a.n)*interval
			if tat-now > span {
				return i
			}
		}
	}
	return -1
}

// TestPrefetchExact: several Limiters, each on a client of its own and
// each prefetching, take turns on one key at random moments, in bursts
// and trickles, demanding about twice the limit; every admission, local or
// not, is recorded and replayed through an exact model of the limit
// without prefetch, which must admit them all. Fixed and adaptive fetch
// sizes both.
func TestPrefetchExact(t *testing.T) {
	limits := []core.Limit{
		{Rate: 50, Period: time.Hour, Burst: 20, Prefetch: 8},
		{Algorithm: core.TokenBucket, Rate: 60, Period: time.Hour, Burst: 30, Prefetch: 10},
		{Algorithm: core.FixedWindow, Rate: 40, Period: time.Hour, Prefetch: 10},
	}
	for _, fixed := range []bool{true, false} {
		for _, l := range limits {
			t.Run(fmt.Sprintf("%v/fixed=%v", l, fixed), func(t *testing.T) {
				for _, b := range backends[:2] {
					t.Run(b.name, func(t *testing.T) {
						w := b.start(t)(t)
						if fixed {
							w.opts = append(w.opts, core.WithFixedPrefetch())
						}
						admitted, local := simulate(t, w, l, 4, 3000, 7)
						if i := conforms(l, admitted); i >= 0 {
							t.Fatalf("admission %d of %d (%d at %v) would not have been admitted without prefetch",
								i, len(admitted), admitted[i].n, admitted[i].at.Sub(t0))
						}
						if local == 0 {
							t.Fatal("no decision was answered in process: the test proves nothing")
						}
						t.Logf("%d admissions, %d answered in process", len(admitted), local)
					})
				}
			})
		}
	}
}

// simulate runs steps decisions of 1 or 2 events on key "k" by instances
// Limiters of w, each on its own client, one after another at random
// moments, and returns the admissions and how many were answered in
// process.
func simulate(t *testing.T, w *world, l core.Limit, instances, steps int, seed uint64) ([]admission, int) {
	t.Helper()
	lims := make([]*core.Limiter, instances)
	for i := range lims {
		lims[i] = w.limiter()
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	now, local := t0, 0
	interval := l.Period / time.Duration(l.Rate)
	var admitted []admission
	for range steps {
		var gap time.Duration
		switch r := rng.IntN(20); {
		case r < 6: // a burst at one instant
		case r < 17: // about twice the limit
			gap = time.Duration(rng.Int64N(int64(interval)))
		default: // a pause, long enough to refill much of the burst
			gap = time.Duration(rng.Int64N(int64(interval) * int64(l.Capacity())))
		}
		gap = gap.Truncate(time.Microsecond)
		w.advance(gap)
		now = now.Add(gap)
		n := 1 + rng.IntN(2)
		res := allowN(t, lims[rng.IntN(instances)], "k", l, n)
		if res.Allowed {
			admitted = append(admitted, admission{now, n})
			if res.Cached {
				local++
			}
		}
	}
	return admitted, local
}

// TestPrefetchRoundTrips: a Limiter that takes prefetch=N events at a
// time makes one round trip for N+1 decisions, and its Results count down
// through what it holds. At one instant a burst gets the limit's capacity
// less the lease's slack: the first fetch leaves the meter at least 20 ms
// of its rate plus what it holds from full (19 events more than it took,
// at 1000/s), which stays counted until the meter refills it.
func TestPrefetchRoundTrips(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	trips := &roundTrips{}
	rdb.AddHook(trips)
	clock := &fakeClock{now: t0}
	lim := core.New(rdb, core.WithClock(clock.Now), patient, core.WithFixedPrefetch())
	l := core.Limit{Rate: 1000, Period: time.Second, Prefetch: 100}
	trips.warm(t, lim, core.PerSecond(1))
	ctx := context.Background()
	admitted := 0
	for i := 0; i < 2000; i++ {
		res, err := lim.Allow(ctx, "hot", l)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			break
		}
		admitted++
		if res.Remaining != 980-i || res.Cached != (i%101 != 0) {
			t.Fatalf("decision %d: %+v; want %d remaining, cached %v", i, res, 980-i, i%101 != 0)
		}
	}
	if admitted != 981 {
		t.Fatalf("%d admitted at one instant, want 981: 1000 less the 19 events of the lease's slack", admitted)
	}
	if got := trips.trips.Load(); got != 11 {
		t.Fatalf("%d round trips for %d decisions, want 11: 10 fetches and the denial", got, admitted+1)
	}
	clock.Advance(20 * time.Millisecond) // 20 more come; the slack stays counted as events do
	if res, _ := lim.AllowN(ctx, "hot", core.Limit{Rate: 1000, Period: time.Second}, 0); res.Remaining != 20 {
		t.Fatalf("20 ms later: %+v, want 20 remaining", res)
	}
}

// TestPrefetchPartial: a fetch takes what is left when less than it asks
// for fits, and a decision whose own cost does not fit is denied as
// without prefetch.
func TestPrefetchPartial(t *testing.T) {
	eachBackend(t, func(t *testing.T, w *world) {
		lim, other := fixed(w), w.limiter()
		l := core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: time.Minute, Prefetch: 8}
		plain := l
		plain.Prefetch = 0
		check(t, "7 without prefetch", allowN(t, other, "k", plain, 7), true, 3)
		check(t, "1 and up to 8 more: 2 fit", allowN(t, lim, "k", l, 1), true, 2)
		if held, ok := lim.Held("k", l); held != 2 || !ok {
			t.Fatalf("held %d (valid %v), want 2", held, ok)
		}
		check(t, "another instance: nothing left", allowN(t, other, "k", plain, 1), false, 0)
		check(t, "2 from the lease", allowN(t, lim, "k", l, 2), true, 0)
		check(t, "then nothing", allowN(t, lim, "k", l, 1), false, 0)
	})
}

// TestPrefetchWindowEnds: a fixed window's prefetched events are not used
// after the window they were counted in; the next window starts afresh.
func TestPrefetchWindowEnds(t *testing.T) {
	eachBackend(t, func(t *testing.T, w *world) {
		lim := fixed(w)
		l := core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: time.Minute, Prefetch: 5}
		check(t, "the first", allowN(t, lim, "k", l, 1), true, 9)
		w.advance(time.Minute - time.Microsecond)
		if res := allowN(t, lim, "k", l, 1); !res.Allowed || !res.Cached {
			t.Fatalf("the last µs of the window: %+v, want allowed from the lease", res)
		}
		w.advance(time.Microsecond)
		if held, ok := lim.Held("k", l); held != 4 || ok {
			t.Fatalf("at the window's end: %d held, valid %v; want 4, no longer valid", held, ok)
		}
		res := allowN(t, lim, "k", l, 1)
		if !res.Allowed || res.Cached || res.Remaining != 9 {
			t.Fatalf("the next window: %+v, want a fetch with 9 remaining (4 + 5 held)", res)
		}
	})
}

// TestPrefetchMeterLapses: a meter's lease holds its events only while
// the meter would still count them: used slower than the limit's rate
// from a full bucket, it lapses, and the decision after fetches anew.
func TestPrefetchMeterLapses(t *testing.T) {
	eachBackend(t, func(t *testing.T, w *world) {
		lim := fixed(w)
		l := core.Limit{Rate: 10, Period: time.Second, Prefetch: 5} // 100 ms an event
		check(t, "1 and 5 held", allowN(t, lim, "k", l, 1), true, 9)
		// 6 counted from a full bucket: full again in 600 ms; 5 held are
		// counted until 100 ms, then one fewer each 100 ms.
		w.advance(100 * time.Millisecond)
		if held, ok := lim.Held("k", l); held != 5 || ok {
			t.Fatalf("after 100 ms: %d held, valid %v; want 5, lapsed", held, ok)
		}
		// The 5 that lapsed stay counted until they drain: at 100 ms, 5 of
		// the 10 fit, so the fetch takes 1 and 4 more.
		if res := allowN(t, lim, "k", l, 1); res.Cached || res.Remaining != 4 {
			t.Fatalf("after the lapse: %+v, want a fetch, 0 + 4 held remaining", res)
		}
		// Taken at the pace of the limit, the lease lasts.
		for i := 0; i < 4; i++ {
			w.advance(100*time.Millisecond - time.Microsecond)
			if res := allowN(t, lim, "k", l, 1); !res.Allowed || !res.Cached {
				t.Fatalf("at the limit's pace, event %d: %+v, want from the lease", i, res)
			}
			w.advance(time.Microsecond)
		}
	})
}

// TestPrefetchMeterRefilled: a meter that refills while a Limiter holds
// prefetched events must not let it use them on top of a full bucket:
// others take what the meter offers after a pause, and the holder's lease
// has lapsed by then, so the burst stays within the limit.
func TestPrefetchMeterRefilled(t *testing.T) {
	for _, l := range []core.Limit{
		{Rate: 10, Period: time.Second, Prefetch: 5},
		{Algorithm: core.TokenBucket, Rate: 10, Period: time.Second, Prefetch: 5},
	} {
		t.Run(l.String(), func(t *testing.T) {
			eachBackend(t, func(t *testing.T, w *world) {
				holder, other := fixed(w), w.limiter()
				plain := l
				plain.Prefetch = 0
				start := t0
				var admitted []admission
				record := func(lim *core.Limiter, l core.Limit, n int, at time.Duration) {
					if res := allowN(t, lim, "k", l, n); res.Allowed {
						admitted = append(admitted, admission{start.Add(at), n})
					}
				}
				record(holder, l, 1, 0) // 1, and 5 held
				w.advance(550 * time.Millisecond)
				record(other, plain, 9, 550*time.Millisecond) // the bucket holds 9.5
				for i := 0; i < 5; i++ {
					record(holder, l, 1, 550*time.Millisecond)
				}
				if i := conforms(l, admitted); i >= 0 {
					t.Fatalf("admissions %v: the %dth would not have been admitted without prefetch", admitted, i+1)
				}
			})
		})
	}
}

// TestPrefetchFloor: a refund of a reservation made before a prefetch
// cannot move a meter closer to full than the prefetch left it, while the
// prefetching Limiter holds events; the prefetch's own give-back can.
//
// The limits are of an hour: on a real server the keys' time to live runs
// in real time while the fake clock stands still, and of a second it let
// a loaded machine's pause of half a second expire the reservation's key.
func TestPrefetchFloor(t *testing.T) {
	ctx := context.Background()
	for _, l := range []core.Limit{
		{Rate: 10, Period: time.Hour, Prefetch: 4},
		{Algorithm: core.TokenBucket, Rate: 10, Period: time.Hour, Prefetch: 4},
	} {
		t.Run(l.String(), func(t *testing.T) {
			eachBackend(t, func(t *testing.T, w *world) {
				holder, other := fixed(w), w.limiter()
				plain := l
				plain.Prefetch = 0
				r, err := other.Reserve(ctx, "k", []core.Limit{plain}, 5)
				if err != nil || !r.Result().Allowed {
					t.Fatalf("reserve 5: %+v, %v", r, err)
				}
				check(t, "1 and 4 held", allowN(t, holder, "k", l, 1), true, 4)
				if err := r.Settle(ctx, 0); err != nil {
					t.Fatal(err)
				}
				// Without the floor the refund would leave 5 for others while
				// the holder holds 4: 10 in all, where 1 + 4 + 5 = 10 were
				// counted. With it, the refund is held back.
				check(t, "after the earlier reservation's refund", allowN(t, other, "k", plain, 0), true, 0)
				if held, ok := holder.Held("k", l); held != 4 || !ok {
					t.Fatalf("held %d, valid %v; want 4", held, ok)
				}
			})
		})
	}
}

// TestPrefetchGivesBack: on a real clock, a lease left unused goes back to
// Redis within about prefetchIdle (10 ms), and other instances get it;
// while it is held, others see it counted.
//
// A look by another instance shows what is held only if it comes back
// within those 10 ms, which a loaded machine does not promise (a decision
// on miniredis under -race took longer). So a look counts when the holder
// still holds the 50 after it came back: the holder hands them back only
// once it has stopped holding them, so Redis counted them when it
// answered the look. A look that raced the give-back must see the 50
// counted or given back, nothing else; the test tries fresh keys until a
// look counts.
func TestPrefetchGivesBack(t *testing.T) {
	ctx := context.Background()
	for _, l := range []core.Limit{
		{Rate: 100, Period: time.Hour, Prefetch: 50},
		{Algorithm: core.TokenBucket, Rate: 100, Period: time.Hour, Prefetch: 50},
		{Algorithm: core.FixedWindow, Rate: 100, Period: time.Hour, Prefetch: 50},
	} {
		t.Run(l.String(), func(t *testing.T) {
			t.Parallel()
			m := miniredis.RunT(t)
			client := func() *redis.Client {
				c := redis.NewClient(&redis.Options{Addr: m.Addr()})
				t.Cleanup(func() { c.Close() })
				return c
			}
			holder, other := core.New(client(), patient, core.WithFixedPrefetch()), core.New(client(), patient)
			plain := l
			plain.Prefetch = 0
			var key string
			for try := 1; ; try++ {
				key = fmt.Sprint("k", try)
				if res, err := holder.Allow(ctx, key, l); err != nil || !res.Allowed || res.Remaining != 99 {
					t.Fatalf("%+v, %v", res, err)
				}
				res, err := other.AllowN(ctx, key, plain, 0)
				if err != nil {
					t.Fatal(err)
				}
				if held, _ := holder.Held(key, l); held == 50 {
					if res.Remaining != 49 {
						t.Fatalf("others see %d remaining while 50 are held, want 49", res.Remaining)
					}
					if try > 1 {
						t.Logf("%d looks came back after the give-back had begun", try-1)
					}
					break
				}
				if res.Remaining != 49 && res.Remaining != 99 {
					t.Fatalf("others see %d remaining while 50 are held or given back, want 49 or 99", res.Remaining)
				}
				if try == 100 {
					t.Fatal("in 100 tries, no look came back while the 50 were held")
				}
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				res, err := other.AllowN(ctx, key, plain, 0)
				if err != nil {
					t.Fatal(err)
				}
				if res.Remaining == 99 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("5 s later others see %d remaining, want 99: the unused 50 did not go back", res.Remaining)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if held, _ := holder.Held(key, l); held != 0 {
				t.Fatalf("%d still held after the give-back", held)
			}
		})
	}
}

// TestPrefetchReset: a Reset through the Limiter drops what it holds for
// the key: the state it was counted in is gone.
func TestPrefetchReset(t *testing.T) {
	eachBackend(t, func(t *testing.T, w *world) {
		lim := fixed(w)
		l := core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: time.Minute, Prefetch: 5}
		allowN(t, lim, "k", l, 1)
		if err := lim.Reset(context.Background(), "k", l); err != nil {
			t.Fatal(err)
		}
		if held, _ := lim.Held("k", l); held != 0 {
			t.Fatalf("%d held after Reset, want 0", held)
		}
		check(t, "after Reset", allowN(t, lim, "k", l, 1), true, 9)
	})
}

// TestPrefetchSeveralLimits: a decision of several limits prefetches when
// every limit sets Prefetch, taking as many as the tightest allows, and
// not otherwise.
func TestPrefetchSeveralLimits(t *testing.T) {
	eachBackend(t, func(t *testing.T, w *world) {
		lim := fixed(w)
		ctx := context.Background()
		gcra := core.Limit{Rate: 100, Period: time.Second, Prefetch: 10}
		hour := core.Limit{Algorithm: core.FixedWindow, Rate: 6, Period: time.Hour, Prefetch: 5}
		res, err := lim.AllowAll(ctx, "k", []core.Limit{gcra, hour}, 1)
		if err != nil || !res.Allowed || res.Limit != hour || res.Remaining != 5 {
			t.Fatalf("%+v, %v; want allowed, the hour binding with 5 remaining (0 + 5 held)", res, err)
		}
		for i := 0; i < 5; i++ {
			if res, _ := lim.AllowAll(ctx, "k", []core.Limit{gcra, hour}, 1); !res.Allowed || !res.Cached {
				t.Fatalf("event %d from the lease: %+v", i, res)
			}
		}
		if res, _ := lim.AllowAll(ctx, "k", []core.Limit{gcra, hour}, 1); res.Allowed {
			t.Fatalf("a seventh in the hour: %+v", res)
		}
		other := core.Limit{Rate: 100, Period: time.Minute} // no Prefetch: none for the decision
		res, err = lim.AllowAll(ctx, "k2", []core.Limit{gcra, other}, 1)
		if err != nil || res.Cached {
			t.Fatalf("%+v, %v", res, err)
		}
		if res, _ := lim.AllowAll(ctx, "k2", []core.Limit{gcra, other}, 1); res.Cached {
			t.Fatalf("a limit without Prefetch: %+v, want every decision from Redis", res)
		}
	})
}

// TestPrefetchConcurrent: 64 goroutines on one key share the Limiter's
// lease; at a limit they admit exactly it, and most decisions make no
// round trip.
func TestPrefetchConcurrent(t *testing.T) {
	t.Parallel()
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			w := b.start(t)(t)
			l := core.Limit{Algorithm: core.FixedWindow, Rate: 5000, Period: time.Hour, Prefetch: 200}
			lims := []*core.Limiter{w.limiter(), w.limiter()}
			var admitted, local atomic.Int64
			var wg sync.WaitGroup
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for g := 0; g < 64; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					lim := lims[g%2]
					for i := 0; i < 200 && ctx.Err() == nil; i++ {
						res, err := lim.Allow(ctx, "hot", l)
						if err != nil {
							t.Error(err)
							return
						}
						if res.Allowed {
							admitted.Add(1)
						}
						if res.Cached && res.Allowed {
							local.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if got := admitted.Load(); got != 5000 {
				t.Fatalf("%d admitted of 12 800 asked under a limit of 5000, want exactly 5000", got)
			}
			if local.Load() < 4000 {
				t.Fatalf("only %d of 5000 admissions answered in process", local.Load())
			}
		})
	}
}

// TestPrefetchConcurrentMeter: 4 Limiters on separate clients, 16
// goroutines each, hammer one GCRA key at one instant (the clock stands
// still): together they admit no more than the burst, and less by at most
// the documented bound: the lease's slack (20 ms of the rate) and what
// each Limiter still holds (at most Prefetch each).
func TestPrefetchConcurrentMeter(t *testing.T) {
	t.Parallel()
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			w := b.start(t)(t)
			l := core.Limit{Rate: 1000, Period: time.Second, Burst: 2000, Prefetch: 50}
			lims := make([]*core.Limiter, 4)
			for i := range lims {
				lims[i] = w.limiter()
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for g := 0; g < 64; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 100 && ctx.Err() == nil; i++ {
						res, err := lims[g%4].Allow(ctx, "hot", l)
						if err != nil {
							t.Error(err)
							return
						}
						if res.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			got, slack := int(admitted.Load()), 20 // 20 ms at 1000/s
			if got > l.Burst || got < l.Burst-slack-4*l.Prefetch {
				t.Fatalf("%d admitted at one instant of 6400 asked, want at most the burst %d and at least %d",
					got, l.Burst, l.Burst-slack-4*l.Prefetch)
			}
			t.Logf("%d admitted of a burst of %d", got, l.Burst)
		})
	}
}
