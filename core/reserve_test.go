package core_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// Reservations join the shared behaviour suite: every algorithm, on every
// backend, alone and paired.
func init() {
	suiteCases = append(suiteCases,
		struct {
			name string
			run  func(t *testing.T, w *world, a suiteAlgorithm)
		}{"ReserveRefund", testReserveRefund},
		struct {
			name string
			run  func(t *testing.T, w *world, a suiteAlgorithm)
		}{"ReserveCharge", testReserveCharge},
		struct {
			name string
			run  func(t *testing.T, w *world, a suiteAlgorithm)
		}{"ReserveDebt", testReserveDebt},
		struct {
			name string
			run  func(t *testing.T, w *world, a suiteAlgorithm)
		}{"ReservePassedWindow", testReservePassedWindow},
	)
}

// reserve makes a reservation of n under l (with the companion when the
// world is paired) and fails the test on error.
func reserve(t *testing.T, w *world, lim *core.Limiter, key string, l core.Limit, n int) *core.Reservation {
	t.Helper()
	limits := []core.Limit{l}
	if w.paired {
		limits = []core.Limit{companion(l), l}
	}
	r, err := lim.Reserve(context.Background(), key, limits, n)
	if err != nil {
		t.Fatalf("Reserve(%q, %v, %d): %v", key, limits, n, err)
	}
	return r
}

// settle settles r at cost and fails the test on error.
func settle(t *testing.T, r *core.Reservation, cost int) {
	t.Helper()
	if err := r.Settle(context.Background(), cost); err != nil {
		t.Fatalf("Settle(%d): %v", cost, err)
	}
}

// sameState checks that two keys report the same state under l: the
// refund made one as if its events had never been admitted.
func sameState(t *testing.T, what string, lim *core.Limiter, l core.Limit, key, twin string) {
	t.Helper()
	got, want := allowN(t, lim, key, l, 0), allowN(t, lim, twin, l, 0)
	if got != want {
		t.Fatalf("%s: %q reports %+v, its twin %q %+v", what, key, got, twin, want)
	}
}

// testReserveRefund: reserving 6 and settling at 2, now or a seventh of a
// period later, leaves the key as if only 2 had been admitted: exact, for
// every algorithm.
func testReserveRefund(t *testing.T, w *world, a suiteAlgorithm) {
	lim, l := w.limiter(), a.limit
	ctx := context.Background()
	r := reserve(t, w, lim, "k", l, 6)
	check(t, "reserved 6", r.Result(), true, l.Capacity()-6)
	allowN(t, lim, "twin", l, 2)
	settle(t, r, 2)
	sameState(t, "settled at 2 at once", lim, l, "k", "twin")

	r = reserve(t, w, lim, "k2", l, 6)
	allowN(t, lim, "twin2", l, 2)
	w.advance(l.Period / 7)
	settle(t, r, 2)
	sameState(t, "settled at 2 a seventh of a period later", lim, l, "k2", "twin2")

	if err := r.Settle(ctx, 2); !errors.Is(err, core.ErrSettled) {
		t.Fatalf("a second Settle: %v, want ErrSettled", err)
	}
	if err := r.Release(ctx); !errors.Is(err, core.ErrSettled) {
		t.Fatalf("Release after Settle: %v, want ErrSettled", err)
	}
}

// testReserveCharge: reserving 2 and settling at 5 a little later leaves
// the key as admitting 2 then, and 3 at the settlement, would.
func testReserveCharge(t *testing.T, w *world, a suiteAlgorithm) {
	lim, l := w.limiter(), a.limit
	r := reserve(t, w, lim, "k", l, 2)
	allowN(t, lim, "twin", l, 2)
	w.advance(l.Period / 7)
	settle(t, r, 5)
	allowN(t, lim, "twin", l, 3)
	sameState(t, "settled at 5", lim, l, "k", "twin")
}

// testReserveDebt: a cost far above the burst, settled, puts the key into
// debt: denied, Remaining 0, and waiting at least as long as a key just
// drained. For the meters, a debt lasts at most one Period by default
// (Limit.MaxDebt 0), and the whole debt with a MaxDebt long enough.
func testReserveDebt(t *testing.T, w *world, a suiteAlgorithm) {
	lim, l, b := w.limiter(), a.limit, a.limit.Capacity()
	r := reserve(t, w, lim, "k", l, 1)
	settle(t, r, 3*b)
	drain(t, lim, "drained", l)
	debt, empty := allowN(t, lim, "k", l, 1), allowN(t, lim, "drained", l, 1)
	check(t, "in debt", debt, false, 0)
	if debt.RetryAfter < empty.RetryAfter {
		t.Fatalf("in debt, RetryAfter %v; a drained key's is %v", debt.RetryAfter, empty.RetryAfter)
	}
	switch l.Algorithm {
	case core.GCRA, core.TokenBucket, core.LeakyBucket:
		if l.Stepped {
			break
		}
		// 3b events taken, b of them the burst: 2b to drain, at most one
		// Period by default; then 1.
		interval := l.Period / time.Duration(l.Rate)
		if want := min(time.Duration(2*b)*interval, l.Period) + interval; debt.RetryAfter != want {
			t.Fatalf("in debt, RetryAfter %v, want %v: the debt, at most one period", debt.RetryAfter, want)
		}
		long := l
		long.MaxDebt = 10 * l.Period
		r := reserve(t, w, lim, "long", long, 1)
		settle(t, r, 3*b)
		if got, want := allowN(t, lim, "long", long, 1).RetryAfter, time.Duration(2*b+1)*interval; got != want {
			t.Fatalf("with MaxDebt %v: in debt, RetryAfter %v, want %v: the whole debt", long.MaxDebt, got, want)
		}
	}
}

// testReservePassedWindow: a refund after the reserved events have left
// the limit (the window passed, the meter drained) gives nothing to what
// came since: the 3 admitted after stay counted.
func testReservePassedWindow(t *testing.T, w *world, a suiteAlgorithm) {
	lim, l := w.limiter(), a.limit
	r := reserve(t, w, lim, "k", l, 6)
	w.advance(2 * l.Period)
	allowN(t, lim, "k", l, 3)
	allowN(t, lim, "twin", l, 3)
	settle(t, r, 0)
	sameState(t, "refund after the window", lim, l, "k", "twin")
}

// TestReserveEdges: what holds whatever the algorithm: a denied
// Reservation and one of n = 0 settle to nothing and never fail; a
// negative cost is an error that leaves the Reservation to settle; a
// settlement that changes nothing sends nothing.
func TestReserveEdges(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	trips := &roundTrips{}
	rdb.AddHook(trips)
	lim := core.New(rdb, patient)
	ctx := context.Background()
	l := core.PerHour(2)

	r, err := lim.Reserve(ctx, "k", []core.Limit{l}, 3)
	if err != nil || r.Result().Allowed {
		t.Fatalf("3 of a burst of 2: %+v, %v; want a denied Reservation", r, err)
	}
	for i := 0; i < 2; i++ {
		if err := r.Settle(ctx, 1); err != nil {
			t.Fatalf("Settle of a denied Reservation: %v", err)
		}
		if err := r.Release(ctx); err != nil {
			t.Fatalf("Release of a denied Reservation: %v", err)
		}
	}
	if r, err = lim.Reserve(ctx, "k", []core.Limit{l}, 0); err != nil || !r.Result().Allowed || r.Settle(ctx, 0) != nil {
		t.Fatalf("n = 0: %+v, %v", r, err)
	}
	if _, err := lim.Reserve(ctx, "k", []core.Limit{l}, -1); !errors.Is(err, core.ErrInvalidCost) {
		t.Fatalf("n = -1: %v, want ErrInvalidCost", err)
	}

	r, err = lim.Reserve(ctx, "k", []core.Limit{l}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Settle(ctx, -1); !errors.Is(err, core.ErrInvalidCost) {
		t.Fatalf("Settle(-1): %v, want ErrInvalidCost", err)
	}
	trips.reset()
	if err := r.Settle(ctx, 1); err != nil {
		t.Fatalf("Settle at the reserved cost after a refused one: %v", err)
	}
	if n := trips.trips.Load(); n != 0 {
		t.Fatalf("a settlement that changes nothing made %d round trips", n)
	}
	for i, key := range []string{"k2", "k3"} { // the first loads the settlement script (NOSCRIPT, then EVAL)
		r, _ = lim.Reserve(ctx, key, []core.Limit{l}, 2)
		trips.reset()
		if err := r.Settle(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if n := trips.trips.Load(); i == 1 && n != 1 {
			t.Fatalf("a refund made %d round trips, want 1", n)
		}
	}
}

// TestReserveSettleNotSent: a settlement the open breaker refused was
// never sent, so the Reservation stays unsettled and a later Settle, once
// Redis is back, refunds it; one that was sent and failed counts as
// settled.
func TestReserveSettleNotSent(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	lim := core.New(rdb, core.WithBreaker(time.Millisecond), core.WithTimeout(time.Second),
		core.WithLogger(slog.New(slog.DiscardHandler)))
	ctx := context.Background()
	l := core.PerHour(2)
	r, err := lim.Reserve(ctx, "k", []core.Limit{l}, 2)
	if err != nil || !r.Result().Allowed {
		t.Fatalf("%+v, %v", r, err)
	}
	sent, err := lim.Reserve(ctx, "other", []core.Limit{l}, 2)
	if err != nil || !sent.Result().Allowed {
		t.Fatalf("%+v, %v", sent, err)
	}

	m.Close()
	if err := sent.Settle(ctx, 0); err == nil || errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("a settlement sent to a closed server: %v, want a connection error", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, err = lim.Allow(ctx, "x", l); !errors.Is(err, core.ErrUnavailable); _, err = lim.Allow(ctx, "x", l) {
		if time.Now().After(deadline) {
			t.Fatalf("the breaker has not opened: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	// Open, and its next probe 250 ms away: this one is not sent.
	if err := r.Settle(ctx, 0); !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("Settle with the breaker open: %v, want ErrUnavailable", err)
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for err = r.Settle(ctx, 0); err != nil; err = r.Settle(ctx, 0) {
		if !errors.Is(err, core.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("Settle once Redis is back: %v, want nil after ErrUnavailable", err)
		}
		time.Sleep(10 * time.Millisecond) // the breaker probes every 250 ms
	}
	if err := r.Release(ctx); !errors.Is(err, core.ErrSettled) {
		t.Fatalf("after the refund: %v, want ErrSettled", err)
	}
	if res, err := lim.AllowN(ctx, "k", l, 2); err != nil || !res.Allowed {
		t.Fatalf("after the refund of 2 of 2: %+v, %v; want both back", res, err)
	}
	if err := sent.Settle(ctx, 0); !errors.Is(err, core.ErrSettled) {
		t.Fatalf("a settlement that was sent and failed, again: %v, want ErrSettled", err)
	}
}

// TestReserveMixed: one reservation of limits of several algorithms
// settles each in the same round trip.
func TestReserveMixed(t *testing.T) {
	t.Parallel()
	lim, _, _ := miniLimiter(t)
	limits := mustLimits(t, "10/h, 10/h fixed_window, 10/h sliding_log, 10/h token_bucket")
	r, err := lim.Reserve(context.Background(), "k", limits, 7)
	if err != nil || !r.Result().Allowed {
		t.Fatalf("%+v, %v", r, err)
	}
	settle(t, r, 3)
	for _, l := range limits {
		if res := allowN(t, lim, "k", l, 0); res.Remaining != 7 {
			t.Errorf("%v after a refund of 4 of 7: Remaining %d, want 7", l, res.Remaining)
		}
	}
}
