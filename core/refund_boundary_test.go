package core_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// Refunds across a state boundary (issue 32, defects 4 and 5): a refund
// gives back only what its reservation's events still hold in the state
// they were counted in. A rate or burst change (the state kept, as
// RuleSet.Update and a named policy promise) and a clock that steps back
// are boundaries: a refund of a reservation made before one gives back
// nothing, so that no span admits more than the limit now in force allows.

// fakeWorld is a Limiter on the client's clock (WithClock) over a fresh
// backend, with the admin client and a clock to step.
type fakeWorld struct {
	lim   *core.Limiter
	admin redis.UniversalClient
	pfx   string
	mu    sync.Mutex
	now   time.Time
}

func newFakeWorld(t *testing.T, b backend) *fakeWorld {
	w := b.start(t)(t)
	f := &fakeWorld{admin: w.admin, pfx: uniquePrefix(), now: t0}
	f.lim = core.New(w.newClient(), patient, core.WithPrefix(f.pfx), core.WithDenyCache(0),
		core.WithClock(func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }))
	return f
}

func (f *fakeWorld) step(d time.Duration) { f.mu.Lock(); f.now = f.now.Add(d); f.mu.Unlock() }

// drain admits one event at a time until denied and returns how many.
func (f *fakeWorld) drain(t *testing.T, key string, l core.Limit) int {
	t.Helper()
	n := 0
	for ; n < 1000; n++ {
		res, err := f.lim.Allow(context.Background(), key, l)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			return n
		}
	}
	t.Fatalf("%v admitted 1000 at once", l)
	return n
}

// boundaryLimits are the limits with refunds: every meter and window
// algorithm (a sliding log's refund names its own entries, and is exact).
func boundaryLimits(rate int) []core.Limit {
	return []core.Limit{
		{Algorithm: core.GCRA, Rate: rate, Period: time.Second},
		{Algorithm: core.TokenBucket, Rate: rate, Period: time.Second},
		{Algorithm: core.TokenBucket, Rate: rate, Period: time.Second, Stepped: true},
		{Algorithm: core.LeakyBucket, Rate: rate, Period: time.Second},
		{Algorithm: core.LeakyBucket, Rate: rate, Period: time.Second, Shape: true},
		{Algorithm: core.FixedWindow, Rate: rate, Period: time.Second},
		{Algorithm: core.SlidingWindow, Rate: rate, Period: time.Second, Buckets: 5},
	}
}

// TestRefundAcrossRateChange: a reservation of 1 or 3 made under 3/s;
// then, at once or 482 ms later, the limit raised to 10/s with its state
// kept and 2 requests or all it admits; the old reservation
// refunded; and drained at that instant. A refund treats its events as
// never admitted, so at that instant no more than the new burst, 10, were
// admitted. (A refund reckoned at the new rate, or at the old one after
// the new rate's admissions, gives back more: 11 or more at one instant.)
func TestRefundAcrossRateChange(t *testing.T) {
	t.Parallel()
	for _, b := range backends[:2] { // miniredis, standalone
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for i, after := range boundaryLimits(10) {
				before := after
				before.Rate = 3
				t.Run(fmt.Sprint(i, after), func(t *testing.T) {
					for _, gap := range []time.Duration{0, 482 * time.Millisecond} {
						for _, n := range []int{1, 3} {
							for _, k := range []int{2, -1} {
								admitted := refundAcrossChange(t, b, before, after, n, gap, k)
								if admitted > 10 {
									t.Fatalf("reserved %d under %v, %v later %d requests under %v, the reservation refunded: %d admitted at one instant; want at most 10",
										n, before, gap, k, after, admitted)
								}
							}
						}
					}
				})
			}
		})
	}
}

// TestSettleAfterRateLowered: a reservation of 4 under 10/s burst 15; the
// limit lowered to 3/s burst 5 with its state kept, and drained; 332 ms
// later the reservation refunded, and drained again. The refund gives
// nothing back (its events were counted under another limit), and the
// settlement refills nothing at the old rate: at most the new burst and
// the one event 3/s brings in 332 ms were admitted under the new limit.
func TestSettleAfterRateLowered(t *testing.T) {
	t.Parallel()
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for i, after := range boundaryLimits(3)[:5] { // the meters
				after.Burst = 5
				before := after
				before.Rate, before.Burst = 10, 15
				t.Run(fmt.Sprint(i, after), func(t *testing.T) {
					f := newFakeWorld(t, b)
					ctx := context.Background()
					r, err := f.lim.Reserve(ctx, "k", []core.Limit{before}, 4)
					if err != nil || !r.Result().Allowed {
						t.Fatalf("reserve 4 under %v: %+v, %v", before, r.Result(), err)
					}
					admitted := f.drain(t, "k", after)
					f.step(332 * time.Millisecond)
					if err := r.Settle(ctx, 0); err != nil {
						t.Fatal(err)
					}
					if admitted += f.drain(t, "k", after); admitted > 6 {
						t.Fatalf("%d admitted under %v within 332 ms of its change; want at most 6", admitted, after)
					}
				})
			}
		})
	}
}

// refundAcrossChange reserves n under before, waits gap, sends k requests
// under after (-1: until one is denied), refunds the reservation and
// drains under after; it returns how many were admitted after the gap.
func refundAcrossChange(t *testing.T, b backend, before, after core.Limit, n int, gap time.Duration, k int) int {
	t.Helper()
	f := newFakeWorld(t, b)
	ctx := context.Background()
	r, err := f.lim.Reserve(ctx, "k", []core.Limit{before}, n)
	if err != nil || !r.Result().Allowed {
		t.Fatalf("reserve %d under %v: %+v, %v", n, before, r.Result(), err)
	}
	f.step(gap)
	admitted := 0
	for j := 0; j != k; j++ {
		res, err := f.lim.Allow(ctx, "k", after)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			break
		}
		admitted++
	}
	if err := r.Settle(ctx, 0); err != nil {
		t.Fatal(err)
	}
	return admitted + f.drain(t, "k", after)
}

// TestRefundAfterClockStepsBack: a reservation of 5 at T drains and its
// state expires (deleted, as its TTL would); the clock steps back 2 s, to
// before T; 10 are admitted, and then the reservation refunded: nothing
// more is admitted at that instant, not 5 more.
func TestRefundAfterClockStepsBack(t *testing.T) {
	t.Parallel()
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for i, l := range boundaryLimits(10) {
				t.Run(fmt.Sprint(i, l), func(t *testing.T) {
					f := newFakeWorld(t, b)
					ctx := context.Background()
					f.step(2 * time.Second)
					r, err := f.lim.Reserve(ctx, "k", []core.Limit{l}, 5)
					if err != nil || !r.Result().Allowed {
						t.Fatalf("reserve 5: %+v, %v", r.Result(), err)
					}
					f.step(2 * time.Second) // drained
					deleteState(t, f.admin, f.pfx, "k", l)
					f.step(-4 * time.Second) // 2 s before the reservation
					admitted := f.drain(t, "k", l)
					if err := r.Settle(ctx, 0); err != nil {
						t.Fatal(err)
					}
					admitted += f.drain(t, "k", l)
					if admitted > 10 {
						t.Fatalf("%d admitted at one instant after a refund across a clock step back; want at most 10", admitted)
					}
				})
			}
		})
	}
}

// deleteState deletes the state key of l for key, as its TTL would.
func deleteState(t *testing.T, admin redis.UniversalClient, prefix, key string, l core.Limit) {
	t.Helper()
	if err := admin.Del(context.Background(), stateKey(prefix, key, l)).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestRefusedConnectionNamed: a decision on a Redis that refuses
// connections (killed, or not started) says so, not only that it had no
// answer in time; it still wraps ErrTimeout.
func TestRefusedConnectionNamed(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	for _, direct := range []bool{true, false} {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: direct})
		t.Cleanup(func() { rdb.Close() })
		lim := core.New(rdb, core.WithLogger(slog.New(slog.DiscardHandler)), core.WithBreaker(0))
		for i := range 2 {
			_, err := lim.Allow(context.Background(), "k", core.PerMinute(10))
			if !errors.Is(err, core.ErrTimeout) || !strings.Contains(err.Error(), "connection refused") {
				t.Fatalf("direct=%v, decision %d on a closed port: %v; want ErrTimeout naming the refused connection", direct, i, err)
			}
		}
	}
}

// TestDebtBoundedByDefault: one settlement's charge, however large, leaves
// a key in debt for at most about one Period (Limit.MaxDebt 0): a request
// that reports 1e9 bytes under 1000/m makes the next wait at most a minute
// and one event, not 1.9 years; every algorithm's debt ends within about
// a Period. A MaxDebt of an hour lets the same charge wait an hour.
func TestDebtBoundedByDefault(t *testing.T) {
	t.Parallel()
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			limits := append(boundaryLimits(1000), core.Limit{Algorithm: core.SlidingLog, Rate: 1000, Period: time.Second})
			for i, l := range limits {
				l.Period = time.Minute
				t.Run(fmt.Sprint(i, l), func(t *testing.T) {
					f := newFakeWorld(t, b)
					ctx := context.Background()
					r, err := f.lim.Reserve(ctx, "k", []core.Limit{l}, 1)
					if err != nil || !r.Result().Allowed {
						t.Fatalf("reserve: %+v, %v", r.Result(), err)
					}
					if err := r.Settle(ctx, 1_000_000_000); err != nil {
						t.Fatal(err)
					}
					res, err := f.lim.Allow(ctx, "k", l)
					if err != nil {
						t.Fatal(err)
					}
					// a meter: the debt's minute and one event; a stepped
					// bucket's debt is in whole steps, and one more step
					// brings a token; a window: its end; a sliding window's
					// debt leaves with its sub-bucket (a minute and one)
					if most := 2*time.Minute + 12*time.Second; res.Allowed || res.RetryAfter > most {
						t.Fatalf("after a charge of 1e9: %+v; want denied, RetryAfter at most %v", res, most)
					}
					meter := l.Algorithm == core.GCRA || l.Algorithm == core.TokenBucket || l.Algorithm == core.LeakyBucket
					if want := time.Minute + 60*time.Millisecond; meter && !l.Stepped && res.RetryAfter != want {
						t.Fatalf("after a charge of 1e9: RetryAfter %v, want %v: one period of debt and one event", res.RetryAfter, want)
					}
					if l.Algorithm != core.GCRA {
						return
					}
					l.MaxDebt = time.Hour
					r, err = f.lim.Reserve(ctx, "long", []core.Limit{l}, 1)
					if err != nil {
						t.Fatal(err)
					}
					if err := r.Settle(ctx, 1_000_000_000); err != nil {
						t.Fatal(err)
					}
					res, _ = f.lim.Allow(ctx, "long", l)
					if want := time.Hour + 60*time.Millisecond; res.RetryAfter != want {
						t.Fatalf("with MaxDebt 1h, after a charge of 1e9: RetryAfter %v, want %v", res.RetryAfter, want)
					}
				})
			}
		})
	}
}

// TestGCRAReadsEarlierLongForm: a GCRA key in the long form of the
// version before epochs ("t:q:f:b:a p", a reservation's or prefetch's,
// as a rolling deploy leaves it) is read with its backlog: half a second
// of 10/s is 5 events held, so one more leaves 4, not the 9 of an empty
// key.
func TestGCRAReadsEarlierLongForm(t *testing.T) {
	t.Parallel()
	f := newFakeWorld(t, backends[0])
	l := core.Limit{Algorithm: core.GCRA, Rate: 10, Period: time.Second}
	tat := f.now.Add(500 * time.Millisecond).UnixMicro()
	if err := f.admin.Set(context.Background(), stateKey(f.pfx, "k", l), fmt.Sprintf("%d:0:0:100000:5 7:3", tat), 0).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := f.lim.Allow(context.Background(), "k", l)
	if err != nil || !res.Allowed || res.Remaining != 4 {
		t.Fatalf("%+v, %v; want allowed, 4 remaining", res, err)
	}
}
