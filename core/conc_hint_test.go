package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// testConcHoldHint: a Concurrency denial's RetryAfter (and NextAfter) is
// when the slot it waits for is likely free, from how long the key's slots
// were held before (a moving average of the holds settlements ended), and
// never later than that slot's lease end; without history it is the
// first hint (a second), or the lease end if sooner. Exact on the world's clock: each branch of lua/concurrency.lua's
// hint and of its record.
func testConcHoldHint(t *testing.T, w *world) {
	lim := core.New(w.newClient(), append(w.opts[:len(w.opts):len(w.opts)], core.WithDenyCache(0))...)
	l := concLimit(t, "2 concurrent lease=30s")
	limits := []core.Limit{l}
	take := func(key string) *core.Reservation {
		t.Helper()
		r := concReserve(t, lim, key, limits, 1)
		if !r.Result().Allowed {
			t.Fatalf("%s: %+v, want a slot", key, r.Result())
		}
		return r
	}
	deny := func(what, key string, n int, retry, next, reset time.Duration) {
		t.Helper()
		res := concReserve(t, lim, key, limits, n).Result()
		if res.Allowed || res.Remaining != 0 || res.RetryAfter != retry || res.NextAfter != next || res.ResetAfter != reset {
			t.Fatalf("%s: %+v, want denied, RetryAfter %v, NextAfter %v, ResetAfter %v", what, res, retry, next, reset)
		}
	}

	// No history: the first hint, a second, within the lease.
	take("fresh")
	w.advance(time.Second)
	take("fresh")
	w.advance(time.Second)
	deny("no history", "fresh", 1, concFirstHint, concFirstHint, 29*time.Second)
	deny("no history, 2 slots", "fresh", 2, concFirstHint, concFirstHint, 29*time.Second)
	w.advance(28*time.Second - 300*time.Millisecond)
	deny("no history, 300 ms before the first lease ends", "fresh", 1, 300*time.Millisecond, 300*time.Millisecond, time.Second+300*time.Millisecond)

	// Jobs of 200 ms: two held and released, then two more held for 50 ms.
	a, b := take("jobs"), take("jobs")
	w.advance(200 * time.Millisecond)
	release(t, a)
	release(t, b) // the record: 200 ms, then 200 + (200-200)/4
	x := take("jobs")
	y := take("jobs")
	w.advance(50 * time.Millisecond)
	const ms = time.Millisecond
	deny("200 ms jobs, 50 ms in", "jobs", 1, 150*ms, 150*ms, 30*time.Second-50*ms)
	deny("200 ms jobs, 50 ms in, 2 slots", "jobs", 2, 150*ms, 150*ms, 30*time.Second-50*ms)
	// Overdue: the least hint, 10 ms.
	w.advance(time.Second)
	deny("overdue", "jobs", 1, 10*ms, 10*ms, 30*time.Second-1050*ms)
	// x released after 1.05 s: the record moves a quarter of the way:
	// 200 ms + (1050 - 200) ms / 4 = 412.5 ms.
	release(t, x)
	take("jobs") // z
	w.advance(100 * time.Millisecond)
	deny("y overdue, z 100 ms in", "jobs", 1, 10*ms, 10*ms, 30*time.Second-100*ms)
	deny("2 slots: z's", "jobs", 2, 312500*time.Microsecond, 10*ms, 30*time.Second-100*ms)
	// y's lease ends in 5 ms, sooner than the least hint: the lease end.
	w.advance(30*time.Second - 1155*ms)
	deny("y's lease about to end", "jobs", 1, 5*ms, 5*ms, 1055*ms)
	_ = y

	// Allowed, NextAfter is the same hint: a slot taken now is likely free
	// in 200 ms; beside one 50 ms old, in 150 ms.
	first := take("next")
	w.advance(200 * time.Millisecond)
	release(t, first)
	if next := take("next").Result().NextAfter; next != 200*time.Millisecond {
		t.Fatalf("a slot taken with a typical hold of 200 ms: NextAfter %v, want 200ms", next)
	}
	w.advance(50 * time.Millisecond)
	if next := take("next").Result().NextAfter; next != 150*time.Millisecond {
		t.Fatalf("a slot taken beside one 50 ms old: NextAfter %v, want 150ms", next)
	}

	// A release after the lease ended records nothing: the slot was not
	// held that long.
	c, d := take("late"), take("late")
	w.advance(200 * time.Millisecond)
	release(t, c)
	release(t, d) // 200 ms
	p := take("late")
	w.advance(20 * time.Second)
	take("late") // keeps the key (and its record) past p's lease
	w.advance(11 * time.Second)
	release(t, p) // 31 s after it was taken: its lease had ended
	take("late")  // q
	w.advance(50 * time.Millisecond)
	deny("after a late release", "late", 2, 150*ms, 10*ms, 30*time.Second-50*ms)
}

// TestConcurrencyHoldHintRealTime: on redis-server's clock, jobs that
// hold a slot of a 30 s lease for about 200 ms get denials whose
// RetryAfter is about the hold, far under the lease.
func TestConcurrencyHoldHintRealTime(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	lim := core.New(srv.Client(t), patient, core.WithPrefix(uniquePrefix()), core.WithDenyCache(0))
	l := concLimit(t, "2 concurrent lease=30s")
	limits := []core.Limit{l}
	for round := 0; round < 3; round++ {
		a, b := concReserve(t, lim, "k", limits, 1), concReserve(t, lim, "k", limits, 1)
		time.Sleep(200 * time.Millisecond)
		release(t, a)
		release(t, b)
	}
	a, b := concReserve(t, lim, "k", limits, 1), concReserve(t, lim, "k", limits, 1)
	res := concReserve(t, lim, "k", limits, 1).Result()
	if res.Allowed || res.RetryAfter < 100*time.Millisecond || res.RetryAfter > time.Second {
		t.Fatalf("2 of 2 held by jobs of about 200 ms: %+v, want denied with RetryAfter about 200 ms, not the lease", res)
	}
	t.Logf("jobs of 200 ms on a 30 s lease: RetryAfter %v, ResetAfter %v", res.RetryAfter, res.ResetAfter)
	release(t, a)
	release(t, b)
	_ = context.Background
}
