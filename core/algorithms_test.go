package core_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

// Tests of what is special to each algorithm, on miniredis and on a real
// standalone Redis (whose Lua differs: its tostring rounds to 14 digits).

// eachBackend runs f on a fresh world of the miniredis and standalone
// backends.
func eachBackend(t *testing.T, f func(t *testing.T, w *world)) {
	t.Helper()
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b.start(t)(t))
		})
	}
}

// traffic drives attempts at random moments through one key for `periods`
// periods of l, in bursts and trickles, and returns the µs offsets from
// the start at which events were admitted. check runs after each admitted
// event, for invariants of the stored state.
func traffic(t *testing.T, w *world, l core.Limit, periods int, seed uint64, check func()) []time.Duration {
	t.Helper()
	lim := w.limiter()
	rng := rand.New(rand.NewPCG(seed, 1))
	var at time.Duration
	var admitted []time.Duration
	end := time.Duration(periods) * l.Period
	for attempts := 0; at < end && attempts < 20000; attempts++ {
		// mostly small gaps, now and then a long pause or a burst at one instant
		var gap time.Duration
		switch r := rng.IntN(10); {
		case r < 2:
			gap = 0
		case r < 9:
			gap = time.Duration(rng.Int64N(int64(2*l.Period/time.Duration(l.Rate)))) + time.Microsecond
		default:
			gap = time.Duration(rng.Int64N(int64(l.Period)))
		}
		gap = gap.Truncate(time.Microsecond)
		w.advance(gap)
		at += gap
		if res := allowN(t, lim, "k", l, 1); res.Allowed {
			admitted = append(admitted, at)
			if check != nil {
				check()
			}
		}
	}
	if len(admitted) < 2*l.Rate {
		t.Fatalf("traffic admitted only %d events; the test would prove little", len(admitted))
	}
	return admitted
}

// mostInSpan returns the largest number of admitted events (sorted) within
// any half-open span [s, s+span).
func mostInSpan(admitted []time.Duration, span time.Duration) int {
	most, lo := 0, 0
	for hi := range admitted {
		for admitted[hi]-admitted[lo] >= span {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}

// TestWindowGuarantees checks, over random traffic, what each window
// algorithm promises about any span of time.
func TestWindowGuarantees(t *testing.T) {
	t.Parallel()
	const rate = 20
	cases := []struct {
		l           core.Limit
		exactSpan   time.Duration // no span this long admits more than rate
		doubledSpan time.Duration // no span this long admits more than 2*rate
	}{
		{core.Limit{Algorithm: core.SlidingLog, Rate: rate, Period: time.Minute}, time.Minute, 0},
		{core.Limit{Algorithm: core.SlidingWindow, Rate: rate, Period: time.Minute, Buckets: 1}, 0, time.Minute},
		{core.Limit{Algorithm: core.SlidingWindow, Rate: rate, Period: time.Minute, Buckets: 4}, 45 * time.Second, time.Minute},
		{core.Limit{Algorithm: core.SlidingWindow, Rate: rate, Period: time.Minute}, 54 * time.Second, time.Minute},
		{core.Limit{Algorithm: core.FixedWindow, Rate: rate, Period: time.Minute}, 0, time.Minute},
	}
	for _, c := range cases {
		t.Run(c.l.String(), func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, w *world) {
				admitted := traffic(t, w, c.l, 8, 42, nil)
				if c.exactSpan > 0 {
					if got := mostInSpan(admitted, c.exactSpan); got > rate {
						t.Errorf("%d admitted within %v, want at most %d", got, c.exactSpan, rate)
					}
				}
				if c.doubledSpan > 0 {
					if got := mostInSpan(admitted, c.doubledSpan); got > 2*rate {
						t.Errorf("%d admitted within %v, want at most %d", got, c.doubledSpan, 2*rate)
					}
				}
			})
		})
	}
}

// TestWindowEdgeBurst: one event opens a window, rate-1 come just before it
// ends, then rate more try just after. A fixed window admits them all:
// 2*rate-1 events within 1µs. The sliding algorithms do not.
func TestWindowEdgeBurst(t *testing.T) {
	t.Parallel()
	const rate = 10
	for _, c := range []struct {
		l         core.Limit
		atTheEdge int // admitted in the microsecond after the edge
	}{
		{core.Limit{Algorithm: core.FixedWindow, Rate: rate, Period: time.Minute}, rate},
		{core.Limit{Algorithm: core.SlidingLog, Rate: rate, Period: time.Minute}, 1},
		{core.Limit{Algorithm: core.SlidingWindow, Rate: rate, Period: time.Minute}, 0},
		{core.Limit{Algorithm: core.SlidingWindow, Rate: rate, Period: time.Minute, Buckets: 1}, 0},
	} {
		t.Run(c.l.String(), func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, w *world) {
				lim := w.limiter()
				allowN(t, lim, "k", c.l, 1) // at t0, the start of a minute
				w.advance(c.l.Period - time.Microsecond)
				check(t, "just before the edge", allowN(t, lim, "k", c.l, rate-1), true, 0)
				w.advance(time.Microsecond)
				got := 0
				for i := 0; i < rate; i++ {
					if allowN(t, lim, "k", c.l, 1).Allowed {
						got++
					}
				}
				if got != c.atTheEdge {
					t.Fatalf("%d admitted right after the edge, want %d", got, c.atTheEdge)
				}
			})
		})
	}
}

// TestSlidingWindowOneBucket: with one sub-bucket the count is the current
// window's plus the previous window's weighted by its overlap.
func TestSlidingWindowOneBucket(t *testing.T) {
	t.Parallel()
	l := core.Limit{Algorithm: core.SlidingWindow, Rate: 10, Period: time.Second, Buckets: 1}
	eachBackend(t, func(t *testing.T, w *world) {
		lim := w.limiter()
		allowN(t, lim, "k", l, 8) // previous window: 8
		w.advance(1300 * time.Millisecond)
		// 8 weighted by 0.7 = 5.6: 4 remain (10 - 5.6, rounded down).
		check(t, "30% into the next window", allowN(t, lim, "k", l, 0), true, 4)
		check(t, "two more", allowN(t, lim, "k", l, 2), true, 2)
		res := allowN(t, lim, "k", l, 3)
		// 3 fit when 2 + 8*w + 3 <= 10, w <= 5/8: at 37.5% into the window.
		if res.Allowed || res.RetryAfter != 75*time.Millisecond {
			t.Fatalf("cost 3: %+v, want denied for 75ms", res)
		}
	})
}

func TestSlidingWindowMemoryBounded(t *testing.T) {
	t.Parallel()
	l := core.Limit{Algorithm: core.SlidingWindow, Rate: 20, Period: time.Minute, Buckets: 6}
	eachBackend(t, func(t *testing.T, w *world) {
		key := stateKey(w.prefix, "k", l)
		most := int64(0)
		traffic(t, w, l, 10, 7, func() {
			most = max(most, w.admin.HLen(context.Background(), key).Val())
		})
		if most > int64(l.Buckets+1) {
			t.Fatalf("the hash held %d fields, want at most buckets+1 = %d", most, l.Buckets+1)
		}
	})
}

// TestSlidingLogMembers: events in consecutive microseconds and several in
// one microsecond are each one member, and the set never outgrows the rate.
func TestSlidingLogMembers(t *testing.T) {
	t.Parallel()
	l := core.Limit{Algorithm: core.SlidingLog, Rate: 5, Period: time.Hour}
	eachBackend(t, func(t *testing.T, w *world) {
		ctx := context.Background()
		lim := w.limiter()
		for i := 0; i < 5; i++ {
			check(t, fmt.Sprintf("µs %d", i), allowN(t, lim, "apart", l, 1), true, 4-i)
			w.advance(time.Microsecond)
		}
		check(t, "sixth", allowN(t, lim, "apart", l, 1), false, 0)
		if n := w.admin.ZCard(ctx, stateKey(w.prefix, "apart", l)).Val(); n != 5 {
			t.Fatalf("5 events in 5 microseconds are %d members", n)
		}

		check(t, "cost 2", allowN(t, lim, "together", l, 2), true, 3)
		check(t, "cost 3 in the same µs", allowN(t, lim, "together", l, 3), true, 0)
		if n := w.admin.ZCard(ctx, stateKey(w.prefix, "together", l)).Val(); n != 5 {
			t.Fatalf("costs 2 and 3 in one microsecond are %d members", n)
		}
	})
}

func TestSlidingLogMemoryAndExpiry(t *testing.T) {
	t.Parallel()
	l := core.Limit{Algorithm: core.SlidingLog, Rate: 20, Period: time.Minute}
	eachBackend(t, func(t *testing.T, w *world) {
		ctx := context.Background()
		key := stateKey(w.prefix, "k", l)
		most := int64(0)
		traffic(t, w, l, 10, 9, func() {
			most = max(most, w.admin.ZCard(ctx, key).Val())
			if ttl := w.admin.PTTL(ctx, key).Val(); ttl <= l.Period-time.Second || ttl > l.Period {
				t.Fatalf("TTL %v after an event, want one period (%v)", ttl, l.Period)
			}
		})
		if most > int64(l.Rate) {
			t.Fatalf("the log held %d members, want at most the rate %d", most, l.Rate)
		}
	})
}

// TestTokenBucketStepped: tokens come Rate at a time, on a fixed phase from
// the bucket's first use, up to the burst.
func TestTokenBucketStepped(t *testing.T) {
	t.Parallel()
	l := core.Limit{Algorithm: core.TokenBucket, Rate: 10, Period: time.Minute, Burst: 15, Stepped: true}
	eachBackend(t, func(t *testing.T, w *world) {
		lim := w.limiter()
		drained := drain(t, lim, "k", l) // t0: the phase starts
		if drained.ResetAfter != 2*time.Minute {
			t.Fatalf("ResetAfter %v after draining, want two steps", drained.ResetAfter)
		}
		w.advance(90 * time.Second)
		check(t, "1.5 periods: one step of 10", allowN(t, lim, "k", l, 10), true, 0)
		res := allowN(t, lim, "k", l, 1)
		if res.Allowed || res.RetryAfter != 30*time.Second {
			t.Fatalf("after taking the step: %+v, want denied until the next step in 30s", res)
		}
		w.advance(30 * time.Second) // t0+2m: the phase held
		check(t, "the next step", allowN(t, lim, "k", l, 0), true, 10)
		w.advance(10 * time.Minute)
		check(t, "capped at the burst", allowN(t, lim, "k", l, 0), true, 15)
	})
}

// TestBucketsKeepStateWhenTheLimitChanges: the token bucket's credit and the
// leaky bucket's level are stored in units of the limit; a new limit reads
// them as the same number of events.
func TestBucketsKeepStateWhenTheLimitChanges(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, w *world) {
		lim := w.limiter()
		tb := core.Limit{Algorithm: core.TokenBucket, Rate: 10, Period: time.Hour, Burst: 15}
		check(t, "token bucket", allowN(t, lim, "tb", tb, 12), true, 3)
		tb.Rate, tb.Burst = 7, 30
		check(t, "3 tokens under the new limit", allowN(t, lim, "tb", tb, 0), true, 3)

		lb := core.Limit{Algorithm: core.LeakyBucket, Rate: 10, Period: time.Hour, Burst: 15}
		check(t, "leaky bucket", allowN(t, lim, "lb", lb, 12), true, 3)
		lb.Rate, lb.Burst = 7, 30
		check(t, "a level of 12 under the new limit", allowN(t, lim, "lb", lb, 0), true, 18)
	})
}

// TestLeakyBucketShaping: queued events are served Period/Rate apart, the
// queue holds Burst, and no delay exceeds MaxDelay.
func TestLeakyBucketShaping(t *testing.T) {
	t.Parallel()
	const interval = 200 * time.Millisecond
	l := core.Limit{Algorithm: core.LeakyBucket, Rate: 5, Period: time.Second, Burst: 4, Shape: true}
	eachBackend(t, func(t *testing.T, w *world) {
		lim := w.limiter()
		for i := 0; i < 4; i++ {
			res := allowN(t, lim, "queue", l, 1)
			check(t, fmt.Sprintf("request %d", i), res, true, 3-i)
			if want := time.Duration(i) * interval; res.Delay != want {
				t.Fatalf("request %d: Delay %v, want %v", i, res.Delay, want)
			}
		}
		full := allowN(t, lim, "queue", l, 1)
		check(t, "queue full", full, false, 0)
		if full.RetryAfter != interval {
			t.Fatalf("queue full: RetryAfter %v, want %v", full.RetryAfter, interval)
		}
		w.advance(interval)
		if res := allowN(t, lim, "queue", l, 1); !res.Allowed || res.Delay != 3*interval {
			t.Fatalf("one interval later: %+v, want admitted with Delay %v", res, 3*interval)
		}

		capped := l
		capped.MaxDelay = 2 * interval
		for i := 0; i < 3; i++ {
			if res := allowN(t, lim, "capped", capped, 1); !res.Allowed || res.Remaining != 2-i {
				t.Fatalf("capped request %d: %+v, want admitted, Remaining %d", i, res, 2-i)
			}
		}
		res := allowN(t, lim, "capped", capped, 1)
		check(t, "a fourth would wait 3 intervals", res, false, 0)
		if res.RetryAfter != interval {
			t.Fatalf("RetryAfter %v, want %v", res.RetryAfter, interval)
		}
		w.advance(res.RetryAfter)
		if res := allowN(t, lim, "capped", capped, 1); !res.Allowed || res.Delay != capped.MaxDelay {
			t.Fatalf("after RetryAfter: %+v, want admitted with Delay %v", res, capped.MaxDelay)
		}
	})
}

// TestLeakyBucketShapingSpacing: over random traffic, the moments admitted
// events are served (arrival + Delay) are at least Period/Rate apart, and
// no Delay exceeds MaxDelay.
func TestLeakyBucketShapingSpacing(t *testing.T) {
	t.Parallel()
	l := core.Limit{Algorithm: core.LeakyBucket, Rate: 20, Period: time.Second, Burst: 10, Shape: true, MaxDelay: 300 * time.Millisecond}
	interval := l.Period / time.Duration(l.Rate)
	eachBackend(t, func(t *testing.T, w *world) {
		lim := w.limiter()
		rng := rand.New(rand.NewPCG(3, 4))
		var at time.Duration
		var served []time.Duration
		for i := 0; i < 600; i++ {
			gap := time.Duration(rng.Int64N(int64(interval))).Truncate(time.Microsecond)
			w.advance(gap)
			at += gap
			res := allowN(t, lim, "k", l, 1)
			if !res.Allowed {
				continue
			}
			if res.Delay > l.MaxDelay {
				t.Fatalf("Delay %v exceeds MaxDelay %v", res.Delay, l.MaxDelay)
			}
			served = append(served, at+res.Delay)
		}
		if len(served) < 100 {
			t.Fatalf("only %d admitted", len(served))
		}
		sort.Slice(served, func(i, j int) bool { return served[i] < served[j] })
		for i := 1; i < len(served); i++ {
			if gap := served[i] - served[i-1]; gap < interval {
				t.Fatalf("events served %v apart, want at least %v", gap, interval)
			}
		}
	})
}
