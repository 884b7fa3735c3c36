package core_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redlimit/redlimit/core"
)

// Findings of the model check, reduced to scenarios of a few lines.

// ---- the defect, as a scenario ----

// TestRefundOutOfOrder: two reservations of 5 on a limit of burst 10;
// the first is refunded in full, time passes, the key is drained, the
// second is refunded in full, the key is drained again: every event
// admitted at that one instant came from an otherwise empty history (both
// reservations were refunded: as if never admitted), so at most the
// capacity may pass at it. A stepped bucket is also run with 2 tokens a
// step and one step in between (the refund of the second reservation must
// not give back tokens that the step has already refilled).
func TestRefundOutOfOrder(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		l    core.Limit
		wait time.Duration
	}{
		{"gcra", core.Limit{Algorithm: core.GCRA, Rate: 10, Period: time.Second, Burst: 10}, 500 * time.Millisecond},
		{"token_bucket", core.Limit{Algorithm: core.TokenBucket, Rate: 10, Period: time.Second, Burst: 10}, 500 * time.Millisecond},
		{"token_bucket_stepped", core.Limit{Algorithm: core.TokenBucket, Rate: 10, Period: time.Second, Burst: 10, Stepped: true}, 500 * time.Millisecond},
		{"token_bucket_stepped_2_per_100ms", core.Limit{Algorithm: core.TokenBucket, Rate: 2, Period: 100 * time.Millisecond, Burst: 10, Stepped: true}, 100 * time.Millisecond},
		{"leaky_bucket", core.Limit{Algorithm: core.LeakyBucket, Rate: 10, Period: time.Second, Burst: 10}, 500 * time.Millisecond},
		{"leaky_bucket_shape", core.Limit{Algorithm: core.LeakyBucket, Rate: 10, Period: time.Second, Burst: 10, Shape: true}, 500 * time.Millisecond},
		{"fixed_window", core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: time.Second}, 500 * time.Millisecond},
		{"sliding_window", core.Limit{Algorithm: core.SlidingWindow, Rate: 10, Period: time.Second}, 500 * time.Millisecond},
		{"sliding_log", core.Limit{Algorithm: core.SlidingLog, Rate: 10, Period: time.Second}, 500 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			m := miniredis.RunT(t)
			rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			clock := &fakeClock{now: t0}
			lim := core.New(rdb, core.WithClock(clock.Now), patient)
			limits := []core.Limit{c.l}
			var steps []string
			reserve := func() *core.Reservation {
				r, err := lim.Reserve(ctx, "k", limits, 5)
				if err != nil || !r.Result().Allowed {
					t.Fatalf("Reserve 5: %+v, %v", r, err)
				}
				return r
			}
			settle := func(r *core.Reservation, what string) {
				if err := r.Settle(ctx, 0); err != nil {
					t.Fatal(err)
				}
				steps = append(steps, what+" settled at 0")
			}
			drain := func() int {
				n := 0
				for i := 0; i < 100; i++ {
					res, err := lim.Allow(ctx, "k", c.l)
					if err != nil {
						t.Fatal(err)
					}
					if !res.Allowed {
						break
					}
					n++
				}
				steps = append(steps, fmt.Sprintf("drained: %d", n))
				return n
			}
			first, second := reserve(), reserve()
			steps = append(steps, "reserved 5 and 5")
			settle(first, "the first")
			clock.Advance(c.wait)
			steps = append(steps, fmt.Sprintf("waited %v", c.wait))
			got := drain()
			settle(second, "the second")
			got += drain()
			if got > c.l.Capacity() {
				t.Errorf("%v: %d events admitted at one instant, after refunds that leave nothing else admitted; the capacity is %d (%s)",
					c.l, got, c.l.Capacity(), strings.Join(steps, ", "))
			}
		})
	}
}

// ---- two more defects the model found ----

// TestSlidingLogRefundThenAllow: a sliding log names the members of plain
// admissions "<µs>:<i>", i counted from the members already logged at that
// µs. Once a refund has removed a reservation's members logged at the
// same µs, the count is below the highest i in use, a new member takes an
// existing name, and ZADD adds nothing: admitted, never counted. Here 5
// are admitted at one instant after a reservation of 3 was refunded in
// full, so at most 5 more may pass at that instant.
func TestSlidingLogRefundThenAllow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	clock := &fakeClock{now: t0}
	lim := core.New(rdb, core.WithClock(clock.Now), patient)
	l := core.Limit{Algorithm: core.SlidingLog, Rate: 10, Period: time.Second}
	r, err := lim.Reserve(ctx, "k", []core.Limit{l}, 3)
	if err != nil || !r.Result().Allowed {
		t.Fatalf("Reserve 3: %+v, %v", r, err)
	}
	check(t, "5 more", allowN(t, lim, "k", l, 5), true, 2)
	if err := r.Settle(ctx, 0); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := 0; i < 20 && allowN(t, lim, "k", l, 1).Allowed; i++ {
		n++
	}
	if n > 5 {
		t.Errorf("%v: after a refund of 3 at one instant with 5 admitted, %d more admitted at that instant; want at most 5", l, n)
	}
}

// TestPrefetchAfterCharge: a Limiter holds prefetched events; another
// reserves what is left and settles at a cost far above it (a charge: the
// key goes into debt, and later requests must wait it out). The held
// events were counted when they were fetched, before the debt: the holder
// may still admit them (and no more), and its next decision that reaches
// Redis waits the debt out (docs/lifecycle.md#prefetch).
func TestPrefetchAfterCharge(t *testing.T) {
	t.Parallel()
	for _, l := range []core.Limit{
		{Algorithm: core.GCRA, Rate: 10, Period: time.Second, Burst: 10, Prefetch: 5},
		{Algorithm: core.TokenBucket, Rate: 10, Period: time.Second, Burst: 10, Prefetch: 5},
		{Algorithm: core.FixedWindow, Rate: 10, Period: time.Second, Prefetch: 5},
	} {
		t.Run(string(l.Algorithm), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			m := miniredis.RunT(t)
			client := func() *redis.Client {
				c := redis.NewClient(&redis.Options{Addr: m.Addr()})
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			clock := &fakeClock{now: t0}
			holder := core.New(client(), core.WithClock(clock.Now), patient, core.WithFixedPrefetch())
			other := core.New(client(), core.WithClock(clock.Now), patient)
			plain := l
			plain.Prefetch = 0
			if res := allowN(t, holder, "k", l, 1); !res.Allowed {
				t.Fatalf("the first: %+v", res)
			}
			if held, ok := holder.Held("k", l); held != 5 || !ok {
				t.Fatalf("held %d (valid %v), want 5", held, ok)
			}
			r, err := other.Reserve(ctx, "k", []core.Limit{plain}, 4)
			if err != nil || !r.Result().Allowed {
				t.Fatalf("Reserve 4: %+v, %v", r.Result(), err)
			}
			if err := r.Settle(ctx, 14); err != nil { // 10 more: a debt
				t.Fatal(err)
			}
			if res := allowN(t, other, "k", plain, 0); res.Remaining != 0 {
				t.Fatalf("after the charge: %+v, want 0 remaining (in debt)", res)
			}
			for i := range 5 {
				if res := allowN(t, holder, "k", l, 1); !res.Allowed || !res.Cached {
					t.Fatalf("held event %d: %+v; want admitted from the lease", i+1, res)
				}
			}
			// 1 + 5 held + 4 reserved: the burst, counted before the debt;
			// the 10 charged after them are a debt the next one waits out.
			if res := allowN(t, holder, "k", l, 1); res.Allowed || res.RetryAfter <= 0 {
				t.Errorf("%v: after the lease, %+v; want denied in debt", l, res)
			}
		})
	}
}
