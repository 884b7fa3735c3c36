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

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// Concurrency limits and Reservations: slots held while a request runs,
// freed by Settle or Release, or by the lease's end when the holder never
// says. These tests pin down the semantics on every backend, exactness
// across instances, dead holders, the deny cache, a Release lost to a
// stopped Redis, and batching.

// concLimit parses one limit and fails the test on error.
func concLimit(t *testing.T, s string) core.Limit {
	t.Helper()
	l, err := core.ParseLimit(s)
	if err != nil {
		t.Fatalf("ParseLimit(%q): %v", s, err)
	}
	return l
}

// concReserve makes a Reservation of n under limits and fails the test on
// error.
func concReserve(t *testing.T, lim *core.Limiter, key string, limits []core.Limit, n int) *core.Reservation {
	t.Helper()
	r, err := lim.Reserve(context.Background(), key, limits, n)
	if err != nil {
		t.Fatalf("Reserve(%q, %s, %d): %v", key, core.FormatLimits(limits), n, err)
	}
	if r == nil {
		t.Fatalf("Reserve(%q, %s, %d): a nil Reservation without an error", key, core.FormatLimits(limits), n)
	}
	return r
}

// freeSlots peeks (a Reservation of 0) at how many slots of l key has free.
func freeSlots(t *testing.T, lim *core.Limiter, key string, l core.Limit) int {
	t.Helper()
	res := concReserve(t, lim, key, []core.Limit{l}, 0).Result()
	if !res.Allowed || res.Cached {
		t.Fatalf("a peek at %q under %v: %+v, want allowed, from Redis", key, l, res)
	}
	return res.Remaining
}

// noSlots: key holds no slot (a member scored by a lease end), and if it
// is left at all (for its record of hold times), it expires within the
// lease.
func noSlots(t *testing.T, w *world, what, key string, lease time.Duration) {
	t.Helper()
	ctx := context.Background()
	if n := w.admin.ZCount(ctx, key, "(0", "+inf").Val(); n != 0 {
		t.Fatalf("%s: %d slots stored, want none", what, n)
	}
	if ttl := w.admin.PTTL(ctx, key).Val(); w.admin.Exists(ctx, key).Val() != 0 && (ttl <= 0 || ttl > lease) {
		t.Fatalf("%s: the key is left with PTTL %v, want it to expire within the lease %v", what, ttl, lease)
	}
}

// release releases r and fails the test on error.
func release(t *testing.T, r *core.Reservation) {
	t.Helper()
	if err := r.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// checkDenied: a Concurrency denial with remaining free slots and a
// RetryAfter in (0, lease].
// concFirstHint is what a Concurrency denial's RetryAfter says before a
// settlement has recorded how long the key's slots are held
// (lua/concurrency.lua's conc_first_hint), unless a lease ends sooner.
const concFirstHint = time.Second

func checkDenied(t *testing.T, what string, res core.Result, remaining int, lease time.Duration) {
	t.Helper()
	if res.Allowed || res.Remaining != remaining || res.RetryAfter <= 0 || res.RetryAfter > lease {
		t.Fatalf("%s: %+v, want denied, Remaining %d, RetryAfter in (0, %v]", what, res, remaining, lease)
	}
}

// awaitFree reserves a slot of limits on key through lim every few
// milliseconds until one is admitted, and returns when that was, since
// start (just before slots were taken that hold every one of them for
// lease), and how many denials came first. Every denial must be a
// Concurrency denial within the lease; an admission that returns before
// start+lease fails the test: the slots were still held (1 ms for the
// clocks' granularity: the server's and this process's are the
// machine's).
func awaitFree(t *testing.T, lim *core.Limiter, key string, limits []core.Limit, start time.Time, lease time.Duration) (admitted time.Duration, denials int) {
	t.Helper()
	deadline := start.Add(lease + 2*time.Second)
	for {
		res := concReserve(t, lim, key, limits, 1).Result()
		since := time.Since(start)
		if res.Allowed {
			if since < lease-time.Millisecond {
				t.Fatalf("%s: admitted %v after slots were taken for %v", key, since, lease)
			}
			if denials == 0 {
				t.Logf("%s: inconclusive: the first try came %v after the slots were taken, past their lease", key, since)
			}
			return since, denials
		}
		checkDenied(t, key+": held", res, 0, lease)
		denials++
		if time.Now().After(deadline) {
			t.Fatalf("%s: still denied %v after slots were taken for %v: %+v", key, since, lease, res)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// scriptCalls is a go-redis hook that counts the script calls whose
// arguments name a key under prefix: what a Limiter of that prefix sends.
type scriptCalls struct {
	prefix string
	n      atomic.Int64
}

func (h *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h *scriptCalls) count(cmd redis.Cmder) {
	if !isScript(cmd) {
		return
	}
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.HasPrefix(s, h.prefix) {
			h.n.Add(1)
			return
		}
	}
}

// countingScripter counts the script calls a Limiter sends through it.
type countingScripter struct {
	redis.Scripter
	n atomic.Int64
}

func (c *countingScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	c.n.Add(1)
	return c.Scripter.Eval(ctx, script, keys, args...)
}

func (c *countingScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	c.n.Add(1)
	return c.Scripter.EvalSha(ctx, sha, keys, args...)
}

func (c *countingScripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	c.n.Add(1)
	return c.Scripter.EvalRO(ctx, script, keys, args...)
}

func (c *countingScripter) EvalShaRO(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	c.n.Add(1)
	return c.Scripter.EvalShaRO(ctx, sha, keys, args...)
}

// concurrencyCases run on every backend of the suite, each on a world of
// its own.
var concurrencyCases = []struct {
	name string
	run  func(t *testing.T, w *world)
}{
	{"Countdown", testConcCountdown},
	{"Release", testConcRelease},
	{"RefusedByAllow", testConcRefused},
	{"Mixed", testConcMixed},
	{"LeaseEnds", testConcLeaseEnds},
	{"LeaseEnded", testConcLeaseEnded},
	{"LeaseEndsRealTime", testConcLeaseEndsRealTime},
	{"TTL", testConcTTL},
	{"LimitChange", testConcLimitChange},
	{"Reset", testConcReset},
	{"TwoLeases", testConcTwoLeases},
	{"HoldHint", testConcHoldHint},
}

// TestConcurrencySemantics: what a Concurrency limit promises, on every
// backend the behaviour suite uses (miniredis, standalone, cluster,
// sentinel): slots counted down and denied when none is free, a
// Reservation of n holding n, Settle and Release freeing exactly theirs,
// Allow and its kin refusing the limit, all or nothing with rate limits
// and with another Concurrency limit, leases that end, key TTLs within the
// lease, a Rate changed at run time, and Reset.
func TestConcurrencySemantics(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			newWorld := b.start(t)
			for _, c := range concurrencyCases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, newWorld(t))
				})
			}
		})
	}
}

// testConcCountdown: Reserve up to Rate, each allowed with one slot less;
// the next is denied with Remaining 0 and, with no hold settled yet on the
// key, RetryAfter the first hint (concFirstHint; the lease end if sooner);
// a Reservation of n takes n slots, all or nothing; a cost above Rate is
// never admitted and writes nothing. ResetAfter is the time until the last
// lease ends.
func testConcCountdown(t *testing.T, w *world) {
	ctx := context.Background()
	lim := w.limiter()
	l := core.Limit{Algorithm: core.Concurrency, Rate: 3, Period: time.Hour}
	limits := []core.Limit{l}
	for i := 1; i <= 3; i++ {
		res := concReserve(t, lim, "k", limits, 1).Result()
		check(t, fmt.Sprintf("reservation %d", i), res, true, 3-i)
		if res.Limit != l || res.ResetAfter != time.Hour || res.NextAfter != concFirstHint {
			t.Fatalf("reservation %d: %+v, want Limit %v, ResetAfter the lease, NextAfter the first hint", i, res, l)
		}
	}
	for i := 0; i < 2; i++ {
		res := concReserve(t, lim, "k", limits, 1).Result()
		checkDenied(t, "a fourth", res, 0, time.Hour)
		// The clock stands still: the first lease ends a whole lease from now.
		if res.RetryAfter != concFirstHint || res.ResetAfter != time.Hour || res.Limit != l {
			t.Fatalf("a fourth: %+v, want RetryAfter the first hint, ResetAfter an hour", res)
		}
	}

	// A Reservation of n holds n.
	check(t, "2 of 3", concReserve(t, lim, "n", limits, 2).Result(), true, 1)
	checkDenied(t, "2 more with 1 free", concReserve(t, lim, "n", limits, 2).Result(), 1, time.Hour)
	check(t, "the last one", concReserve(t, lim, "n", limits, 1).Result(), true, 0)

	// Staggered leases: a denial waits for as many leases to end as it
	// needs; ResetAfter is the last lease's end.
	concReserve(t, lim, "s", limits, 1)
	w.advance(10 * time.Minute)
	concReserve(t, lim, "s", limits, 1)
	w.advance(10 * time.Minute)
	res := concReserve(t, lim, "s", limits, 1).Result()
	if !res.Allowed || res.ResetAfter != time.Hour {
		t.Fatalf("third of staggered: %+v, want allowed, ResetAfter an hour", res)
	}
	// Cost 2 first: the deny cache answers a higher cost than it saw
	// denied, with a RetryAfter that is only a lower bound, but not a lower.
	d2 := concReserve(t, lim, "s", limits, 2).Result()
	checkDenied(t, "2 with leases ending in 40, 50 and 60 minutes", d2, 0, time.Hour)
	if d2.RetryAfter != concFirstHint || d2.ResetAfter != time.Hour || d2.NextAfter != concFirstHint {
		t.Fatalf("2 of staggered: %+v, want RetryAfter and NextAfter the first hint, ResetAfter 1h", d2)
	}
	d1 := concReserve(t, lim, "s", limits, 1).Result()
	checkDenied(t, "1 with leases ending in 40, 50 and 60 minutes", d1, 0, time.Hour)
	if d1.RetryAfter != concFirstHint || d1.ResetAfter != time.Hour || d1.Cached {
		t.Fatalf("1 of staggered: %+v, want RetryAfter the first hint, ResetAfter 1h, from Redis", d1)
	}

	// More than Rate can never be admitted, and writes nothing.
	big := concReserve(t, lim, "big", limits, 4).Result()
	if big.Allowed || big.RetryAfter != core.InfDuration || big.Remaining != 3 {
		t.Fatalf("4 of 3: %+v, want denied, RetryAfter InfDuration, Remaining 3", big)
	}
	if n := w.admin.Exists(ctx, stateKey(w.prefix, "big", l)).Val(); n != 0 {
		t.Fatal("a cost above Rate wrote state")
	}
}

// testConcRelease: Release frees exactly the Reservation's slots, and the
// next Reserve is allowed; Settle frees them whatever the cost; a second
// Settle or Release is ErrSettled and frees nothing more; a denied
// Reservation's Settle and Release do nothing and return nil; an invalid
// cost settles nothing.
func testConcRelease(t *testing.T, w *world) {
	ctx := context.Background()
	lim := w.limiter()
	l := core.Limit{Algorithm: core.Concurrency, Rate: 3, Period: time.Hour}
	limits := []core.Limit{l}
	a := concReserve(t, lim, "k", limits, 1)
	b := concReserve(t, lim, "k", limits, 2)
	check(t, "a and b hold 3", b.Result(), true, 0)

	denied := concReserve(t, lim, "k", limits, 1)
	checkDenied(t, "full", denied.Result(), 0, time.Hour)
	for i := 0; i < 2; i++ {
		if err := denied.Settle(ctx, 0); err != nil {
			t.Fatalf("Settle of a denied Reservation: %v, want nil", err)
		}
		if err := denied.Release(ctx); err != nil {
			t.Fatalf("Release of a denied Reservation: %v, want nil", err)
		}
	}
	if got := freeSlots(t, lim, "k", l); got != 0 {
		t.Fatalf("a denied Reservation's Settle and Release freed %d slots", got)
	}

	release(t, b)
	if got := freeSlots(t, lim, "k", l); got != 2 {
		t.Fatalf("b (2 slots) released, a (1) held: %d free, want 2", got)
	}
	c := concReserve(t, lim, "k", limits, 2)
	check(t, "2 more after b's release", c.Result(), true, 0)

	if err := a.Settle(ctx, 0); err != nil {
		t.Fatalf("Settle(0): %v", err)
	}
	if got := freeSlots(t, lim, "k", l); got != 1 {
		t.Fatalf("a settled at 0, c (2) held: %d free, want 1", got)
	}
	if err := c.Settle(ctx, 7); err != nil {
		t.Fatalf("Settle above n: %v", err)
	}
	if got := freeSlots(t, lim, "k", l); got != 3 {
		t.Fatalf("c settled at 7: %d free, want 3", got)
	}

	for _, second := range []struct {
		what string
		err  error
	}{
		{"Release after Release", b.Release(ctx)},
		{"Settle after Release", b.Settle(ctx, 2)},
		{"Release after Settle", a.Release(ctx)},
		{"Settle after Settle", c.Settle(ctx, 2)},
	} {
		if !errors.Is(second.err, core.ErrSettled) {
			t.Errorf("%s: %v, want ErrSettled", second.what, second.err)
		}
	}

	// A second settlement frees nothing: d holds two slots, settled
	// Reservations are settled again, and d's stay held.
	d := concReserve(t, lim, "k", limits, 2)
	_ = b.Release(ctx)
	_ = a.Settle(ctx, 0)
	if got := freeSlots(t, lim, "k", l); got != 1 {
		t.Fatalf("d holds 2; second settlements of others: %d free, want 1", got)
	}

	// An invalid cost is an error and settles nothing; the Reservation can
	// still be released.
	for _, cost := range []int{-1, aboveMaxCount} {
		if err := d.Settle(ctx, cost); !errors.Is(err, core.ErrInvalidCost) {
			t.Fatalf("Settle(%d): %v, want ErrInvalidCost", cost, err)
		}
	}
	if got := freeSlots(t, lim, "k", l); got != 1 {
		t.Fatalf("after invalid Settles: %d free, want 1 (d still holds 2)", got)
	}
	release(t, d)
	if got := freeSlots(t, lim, "k", l); got != 3 {
		t.Fatalf("all released: %d free, want 3", got)
	}
	// No slot is held: none is left in Redis (the key keeps its record of
	// hold times until its last lease would have ended).
	noSlots(t, w, "every slot is free", stateKey(w.prefix, "k", l), l.Period)
}

// testConcRefused: Allow, AllowN (a peek included), AllowAll and Wait
// refuse a Concurrency limit with ErrInvalidLimit, and send nothing; the
// limit itself is valid.
func testConcRefused(t *testing.T, w *world) {
	ctx := context.Background()
	// A Scripter alone, not a hook: the sentinel world's clients are
	// shared, and adding a hook races with their other users.
	rdb := &countingScripter{Scripter: w.newClient()}
	lim := core.New(rdb, w.opts...)
	l := concLimit(t, "2 concurrent")
	if err := l.Validate(); err != nil {
		t.Fatalf("%v: Validate: %v", l, err)
	}
	for _, c := range []struct {
		what string
		err  error
	}{
		{"Allow", func() error { _, err := lim.Allow(ctx, "k", l); return err }()},
		{"AllowN", func() error { _, err := lim.AllowN(ctx, "k", l, 1); return err }()},
		{"AllowN(0)", func() error { _, err := lim.AllowN(ctx, "k", l, 0); return err }()},
		{"AllowAll", func() error { _, err := lim.AllowAll(ctx, "k", []core.Limit{core.PerSecond(10), l}, 1); return err }()},
		{"AllowAll alone", func() error { _, err := lim.AllowAll(ctx, "k", []core.Limit{l}, 1); return err }()},
		{"Wait", lim.Wait(ctx, "k", l)},
	} {
		if !errors.Is(c.err, core.ErrInvalidLimit) {
			t.Errorf("%s with %v: %v, want ErrInvalidLimit", c.what, l, c.err)
		}
	}
	if n := rdb.n.Load(); n != 0 {
		t.Errorf("refused decisions sent %d script calls", n)
	}
	if n := countKeys(t, w); n != 0 {
		t.Errorf("refused decisions wrote %d keys", n)
	}
	// The same Limiter reserves it.
	check(t, "Reserve", concReserve(t, lim, "k", []core.Limit{l}, 1).Result(), true, 1)
	if n := rdb.n.Load(); n < 1 || n > 2 { // EVAL after NOSCRIPT
		t.Errorf("one Reserve sent %d script calls, want 1 (2 with NOSCRIPT)", n)
	}
}

// testConcMixed: a Reservation under "10/h" and "2 concurrent" is all or
// nothing: a denial by either charges neither; a Release frees the slot
// and the rate charge stands, a Settle at 0 refunds it too. (Hour-scale,
// so that real Redis's TTLs, in real time, keep the rate's state while
// the world's clock stands still.)
func testConcMixed(t *testing.T, w *world) {
	ctx := context.Background()
	lim := w.limiter()
	limits := mustLimits(t, "10/h, 2 concurrent lease=1h")
	rate, conc := limits[0], limits[1]
	rateLeft := func() int { return allowN(t, lim, "k", rate, 0).Remaining }

	r1 := concReserve(t, lim, "k", limits, 1)
	r2 := concReserve(t, lim, "k", limits, 1)
	if res := r2.Result(); !res.Allowed || res.Limit != conc || res.Remaining != 0 {
		t.Fatalf("second: %+v, want allowed, bound by the concurrency limit with 0 free", res)
	}
	res := concReserve(t, lim, "k", limits, 1).Result()
	checkDenied(t, "third, no slot free", res, 0, time.Hour)
	if res.Limit != conc {
		t.Fatalf("denied by %v, want the concurrency limit", res.Limit)
	}
	if got := rateLeft(); got != 8 {
		t.Fatalf("the rate limit has %d left after 2 admitted and 1 denied, want 8: the denial charged it", got)
	}

	release(t, r1)
	if got, free := rateLeft(), freeSlots(t, lim, "k", conc); got != 8 || free != 1 {
		t.Fatalf("after Release: rate %d left, %d slots free; want 8 (the cost stands) and 1", got, free)
	}
	r3 := concReserve(t, lim, "k", limits, 1)
	check(t, "after a Release", r3.Result(), true, 0)
	if err := r2.Settle(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if got, free := rateLeft(), freeSlots(t, lim, "k", conc); got != 8 || free != 1 {
		t.Fatalf("after Settle(0): rate %d left, %d slots free; want 8 (refunded) and 1", got, free)
	}

	// The rate limit binds: a slot is free, but the denial takes none.
	allowN(t, lim, "k", rate, rateLeft())
	res = concReserve(t, lim, "k", limits, 1).Result()
	if res.Allowed || res.Limit != rate || res.RetryAfter != 6*time.Minute {
		t.Fatalf("rate spent: %+v, want denied by %v for 6m", res, rate)
	}
	if free := freeSlots(t, lim, "k", conc); free != 1 {
		t.Fatalf("denied by the rate limit: %d slots free, want 1: the denial took a slot", free)
	}
	release(t, r3)
	if res := concReserve(t, lim, "k", limits, 1).Result(); res.Allowed {
		t.Fatalf("rate spent, every slot free: %+v, want denied", res)
	}
	noSlots(t, w, "a Reservation denied by the rate limit", stateKey(w.prefix, "k", conc), conc.Period)
	// Once the rate allows again, both are charged.
	w.advance(time.Hour)
	check(t, "an hour later", concReserve(t, lim, "k", limits, 2).Result(), true, 0)
	if got := rateLeft(); got != 8 {
		t.Fatalf("rate after 2 admitted: %d left, want 8", got)
	}
}

// testConcLeaseEnds: a lease that ends frees its slot, to the
// microsecond: one microsecond before RetryAfter the slot is still held,
// at RetryAfter it is free. On the world's clock (miniredis's server
// clock, else the client's), with the deny cache off, so that each answer
// is Redis's.
func testConcLeaseEnds(t *testing.T, w *world) {
	lim := core.New(w.newClient(), append(w.opts[:len(w.opts):len(w.opts)], core.WithDenyCache(0))...)
	l := concLimit(t, "1 concurrent lease=500ms") // shorter than the first hint: RetryAfter is its end
	limits := []core.Limit{l}
	concReserve(t, lim, "k", limits, 1)
	d := concReserve(t, lim, "k", limits, 1).Result()
	checkDenied(t, "the slot is held", d, 0, 500*time.Millisecond)
	if d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("RetryAfter %v, want the lease (the clock stands still)", d.RetryAfter)
	}
	w.advance(d.RetryAfter - time.Microsecond)
	d = concReserve(t, lim, "k", limits, 1).Result()
	checkDenied(t, "1µs before RetryAfter", d, 0, 10*time.Second)
	if d.RetryAfter != time.Microsecond {
		t.Fatalf("1µs before RetryAfter: RetryAfter %v, want 1µs", d.RetryAfter)
	}
	w.advance(time.Microsecond)
	check(t, "at RetryAfter", concReserve(t, lim, "k", limits, 1).Result(), true, 0)
}

// testConcLeaseEnded: a lease that ended 20µs ago, at an instant that is
// not a round number, is not counted; miniredis, which runs key TTLs on
// the world's clock, has dropped the key once the lease ended.
func testConcLeaseEnded(t *testing.T, w *world) {
	ctx := context.Background()
	lim := core.New(w.newClient(), append(w.opts[:len(w.opts):len(w.opts)], core.WithDenyCache(0))...)
	l := concLimit(t, "1 concurrent lease=10s")
	limits := []core.Limit{l}
	w.advance(20 * time.Microsecond)
	concReserve(t, lim, "k", limits, 1)
	w.advance(10*time.Second + 20*time.Microsecond)
	res := concReserve(t, lim, "k", limits, 1).Result()
	if !res.Allowed {
		t.Fatalf("20µs after the lease ended: %+v, want allowed", res)
	}
	if w.ttlsFollowClock {
		w.advance(10 * time.Second)
		if n := w.admin.Exists(ctx, stateKey(w.prefix, "k", l)).Val(); n != 0 {
			t.Fatal("the key outlived its last lease")
		}
	}
}

// testConcLeaseEndsRealTime: on real Redis, in real time with the server's
// clock, a 200 ms lease frees its slot once it ends and not before, and
// the key expires with it. (miniredis's clock is the world's: there the
// case above covers it.)
func testConcLeaseEndsRealTime(t *testing.T, w *world) {
	if w.ttlsFollowClock {
		return // miniredis: the clock is the world's; LeaseEnds covers it
	}
	ctx := context.Background()
	const lease = 200 * time.Millisecond
	lim := core.New(w.newClient(), patient, core.WithPrefix(w.prefix))
	l := concLimit(t, "1 concurrent lease=200ms")
	limits := []core.Limit{l}
	start := time.Now()
	concReserve(t, lim, "k", limits, 1)
	ttl := w.admin.PTTL(ctx, stateKey(w.prefix, "k", l)).Val()
	if ttl > lease || ttl <= 0 && time.Since(start) < lease {
		t.Fatalf("PTTL %v, want in (0, %v]", ttl, lease)
	}
	admitted, denials := awaitFree(t, lim, "k", limits, start, lease)
	t.Logf("a %v lease: the slot was free again %v after it was taken (%d denials before)", lease, admitted, denials)

	// The key lives no longer than its last lease.
	concReserve(t, lim, "ttl", limits, 1)
	time.Sleep(lease + 20*time.Millisecond)
	if n := w.admin.Exists(ctx, stateKey(w.prefix, "ttl", l)).Val(); n != 0 {
		t.Fatalf("the key outlived its lease of %v", lease)
	}
}

// testConcTTL: the key's PTTL never exceeds the lease: it follows the
// lease that ends last, a Release does not extend it, a peek writes
// nothing, and the key goes once no slot is held.
func testConcTTL(t *testing.T, w *world) {
	ctx := context.Background()
	lim := w.limiter()
	l := core.Limit{Algorithm: core.Concurrency, Rate: 3, Period: time.Hour}
	limits := []core.Limit{l}
	key := stateKey(w.prefix, "k", l)
	pttl := func(what string, least time.Duration) {
		t.Helper()
		ttl, err := w.admin.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= least || ttl > l.Period {
			t.Fatalf("%s: PTTL of %s is %v, want in (%v, %v]", what, key, ttl, least, l.Period)
		}
	}
	freeSlots(t, lim, "k", l)
	if n := w.admin.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("a peek wrote state")
	}
	r1 := concReserve(t, lim, "k", limits, 1)
	pttl("one lease", l.Period-time.Minute)
	w.advance(20 * time.Minute)
	r2 := concReserve(t, lim, "k", limits, 2)
	pttl("a later lease", l.Period-time.Minute)
	checkDenied(t, "full", concReserve(t, lim, "k", limits, 1).Result(), 0, l.Period)
	pttl("after a denial", 0)
	release(t, r2)
	pttl("after releasing the later lease", 0)
	release(t, r1)
	noSlots(t, w, "no slot is held", key, l.Period)
}

// testConcLimitChange: Rate is not part of the key, so a limit changed at
// run time keeps the slots held: raised, the new slots are free; lowered
// below what is held, Reserve is denied with Remaining 0 until enough
// leases end for one more to fit.
func testConcLimitChange(t *testing.T, w *world) {
	lim := w.limiter()
	three := core.Limit{Algorithm: core.Concurrency, Rate: 3, Period: time.Hour}
	for i := 0; i < 3; i++ {
		concReserve(t, lim, "k", []core.Limit{three}, 1)
		w.advance(time.Minute)
	}
	five, one := three, three
	five.Rate, one.Rate = 5, 1
	if free := freeSlots(t, lim, "k", five); free != 2 {
		t.Fatalf("3 held, raised to %v: %d free, want 2", five, free)
	}
	// 3 held, leases ending in 57, 58 and 59 minutes: one more fits under
	// a limit of 1 once all 3 have ended.
	res := concReserve(t, lim, "k", []core.Limit{one}, 1).Result()
	checkDenied(t, "3 held, lowered to 1", res, 0, time.Hour)
	if res.RetryAfter != concFirstHint || res.ResetAfter != 59*time.Minute {
		t.Fatalf("3 held, lowered to 1: %+v, want RetryAfter the first hint, ResetAfter 59m (the last lease's end)", res)
	}
	if free := freeSlots(t, lim, "k", one); free != 0 {
		t.Fatalf("a look under the lowered limit: %d free, want 0", free)
	}
	check(t, "raised to 5", concReserve(t, lim, "k", []core.Limit{five}, 2).Result(), true, 0)
}

// testConcReset: Reset frees every slot of the key; a Release of a
// Reservation made before it then frees nothing of the slots taken since.
func testConcReset(t *testing.T, w *world) {
	ctx := context.Background()
	lim := w.limiter()
	l := core.Limit{Algorithm: core.Concurrency, Rate: 2, Period: time.Hour}
	limits := []core.Limit{l}
	old := concReserve(t, lim, "k", limits, 2)
	checkDenied(t, "full", concReserve(t, lim, "k", limits, 1).Result(), 0, time.Hour)
	if err := lim.Reset(ctx, "k", l); err != nil {
		t.Fatal(err)
	}
	// The denial above is cached: the Reset through this Limiter clears it.
	check(t, "after Reset", concReserve(t, lim, "k", limits, 1).Result(), true, 1)
	release(t, old)
	if free := freeSlots(t, lim, "k", l); free != 1 {
		t.Fatalf("a Release of a Reservation from before the Reset: %d free, want 1 (the new one's slot held)", free)
	}
}

// testConcTwoLeases: two Concurrency limits of different leases on one
// key keep apart and are decided together: the tighter denies, taking
// nothing of the other, and a Release frees the slots of both.
func testConcTwoLeases(t *testing.T, w *world) {
	lim := w.limiter()
	limits := mustLimits(t, "1 concurrent lease=1h, 3 concurrent lease=2h")
	r := concReserve(t, lim, "k", limits, 1)
	if res := r.Result(); !res.Allowed || res.Limit != limits[0] || res.ResetAfter != 2*time.Hour {
		t.Fatalf("first: %+v, want allowed, bound by %v, ResetAfter the longer lease", res, limits[0])
	}
	res := concReserve(t, lim, "k", limits, 1).Result()
	checkDenied(t, "second", res, 0, time.Hour)
	if res.Limit != limits[0] {
		t.Fatalf("second denied by %v, want %v", res.Limit, limits[0])
	}
	if free := freeSlots(t, lim, "k", limits[1]); free != 2 {
		t.Fatalf("%v: %d free after one admitted and one denied, want 2", limits[1], free)
	}
	release(t, r)
	for _, l := range limits {
		if free := freeSlots(t, lim, "k", l); free != l.Rate {
			t.Fatalf("%v: %d free after the Release, want %d", l, free, l.Rate)
		}
	}
}

// TestConcurrencyParse: the grammar of a Concurrency limit, its default
// lease of a minute, and its round trip through String.
func TestConcurrencyParse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want core.Limit
		out  string
	}{
		{"3 concurrent lease=30s", core.Limit{Algorithm: core.Concurrency, Rate: 3, Period: 30 * time.Second}, "3 concurrent lease=30s"},
		{"10 concurrent", core.Limit{Algorithm: core.Concurrency, Rate: 10, Period: time.Minute}, "10 concurrent"},
		{"5 concurrent lease=200ms", core.Limit{Algorithm: core.Concurrency, Rate: 5, Period: 200 * time.Millisecond}, "5 concurrent lease=200ms"},
	} {
		got, err := core.ParseLimit(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		if s := got.String(); s != c.out {
			t.Errorf("%+v.String() = %q, want %q", got, s, c.out)
		}
		if back, err := core.ParseLimit(got.String()); err != nil || back != got {
			t.Errorf("round trip of %q: %+v, %v", c.in, back, err)
		}
	}
	for _, lease := range []time.Duration{time.Millisecond, 250 * time.Millisecond, 90 * time.Second, time.Minute, time.Hour, 36 * time.Hour} {
		l := core.Limit{Algorithm: core.Concurrency, Rate: 7, Period: lease}
		if back, err := core.ParseLimit(l.String()); err != nil || back != l {
			t.Errorf("round trip of %+v through %q: %+v, %v", l, l.String(), back, err)
		}
	}
	for _, in := range []string{
		"0 concurrent",
		"3 concurrent lease=0s",
		"3 concurrent lease=",
		"3/s concurrent",
		"3/s lease=30s",
		"3 concurrency",
		"3/s concurrency",
		"3 concurrent burst=5",
	} {
		if l, err := core.ParseLimit(in); !errors.Is(err, core.ErrInvalidLimit) {
			t.Errorf("ParseLimit(%q) = %+v, %v; want ErrInvalidLimit", in, l, err)
		}
	}
}

// TestConcurrencyParseAlgorithm: "N concurrent" followed by another
// algorithm's name is an error, not a rate limit of N per lease.
func TestConcurrencyParseAlgorithm(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"3 concurrent gcra", "3 concurrent fixed_window lease=30s"} {
		if l, err := core.ParseLimit(in); !errors.Is(err, core.ErrInvalidLimit) {
			t.Errorf("ParseLimit(%q) = %+v (%v), %v; want ErrInvalidLimit", in, l, l.Algorithm, err)
		}
	}
}

// concServers starts a standalone server and a 3-master cluster and runs f
// on each as a parallel subtest, with a function that makes independent
// clients of it.
func concServers(t *testing.T, f func(t *testing.T, newClient func() redis.UniversalClient)) {
	t.Helper()
	for _, c := range []struct {
		name  string
		start func(t *testing.T) func() redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) func() redis.UniversalClient {
			srv := redistest.Standalone(t)
			return func() redis.UniversalClient { return srv.Client(t) }
		}},
		{"cluster", func(t *testing.T) func() redis.UniversalClient {
			cl := redistest.NewCluster(t, 3)
			return func() redis.UniversalClient { return cl.Client(t) }
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f(t, c.start(t))
		})
	}
}

// TestConcurrencyExactAcrossInstances: 4 app instances (Limiters on their
// own clients), 8 goroutines each, take and release slots of one key in
// real time: never more than Rate are held at once, some are admitted and
// some denied, no error, and every slot is free at the end.
func TestConcurrencyExactAcrossInstances(t *testing.T) {
	t.Parallel()
	concServers(t, func(t *testing.T, newClient func() redis.UniversalClient) {
		const instances, goroutines, iterations = 4, 8, 200
		l := concLimit(t, "5 concurrent lease=10s")
		limits := []core.Limit{l}
		prefix := uniquePrefix()
		deadline := time.Now().Add(2 * time.Second)
		var (
			inFlight, most, admitted, denied atomic.Int64
			wg                               sync.WaitGroup
			errs                             = make(chan error, instances*goroutines)
		)
		for i := 0; i < instances; i++ {
			lim := core.New(newClient(), patient, core.WithPrefix(prefix))
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx := context.Background()
					rng := rand.New(rand.NewPCG(uint64(i), uint64(g)))
					for it := 0; it < iterations && time.Now().Before(deadline); it++ {
						r, err := lim.Reserve(ctx, "hot", limits, 1)
						if err != nil {
							errs <- err
							return
						}
						res := r.Result()
						if !res.Allowed {
							denied.Add(1)
							if res.Remaining != 0 || res.RetryAfter <= 0 || res.RetryAfter > l.Period {
								errs <- fmt.Errorf("a denial %+v: want Remaining 0, RetryAfter in (0, %v]", res, l.Period)
								return
							}
							time.Sleep(time.Duration(rng.Int64N(int64(time.Millisecond))))
							continue
						}
						admitted.Add(1)
						if res.Remaining < 0 || res.Remaining >= l.Rate {
							errs <- fmt.Errorf("an admission with Remaining %d", res.Remaining)
							return
						}
						raise(&most, inFlight.Add(1))
						time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Millisecond))))
						inFlight.Add(-1)
						if err := r.Release(ctx); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		t.Logf("%d admitted, %d denied, at most %d in flight", admitted.Load(), denied.Load(), most.Load())
		if most.Load() > int64(l.Rate) {
			t.Fatalf("%d in flight at once under %v", most.Load(), l)
		}
		if admitted.Load() == 0 || denied.Load() == 0 {
			t.Fatalf("%d admitted, %d denied: want some of each", admitted.Load(), denied.Load())
		}
		if free := freeSlots(t, core.New(newClient(), patient, core.WithPrefix(prefix)), "hot", l); free != l.Rate {
			t.Fatalf("every Reservation released, yet %d of %d slots free", free, l.Rate)
		}
	})
}

// TestConcurrencyHolderDies: slots whose holder never releases them, its
// client closed mid-request or the holder gone, are held only until the
// lease ends: others are denied until then and admitted after. The
// holder's Release on a closed client fails, and a second is ErrSettled.
func TestConcurrencyHolderDies(t *testing.T) {
	t.Parallel()
	concServers(t, func(t *testing.T, newClient func() redis.UniversalClient) {
		ctx := context.Background()
		const lease = 300 * time.Millisecond
		l := concLimit(t, "2 concurrent lease=300ms")
		limits := []core.Limit{l}
		prefix := uniquePrefix()
		live := core.New(newClient(), patient, core.WithPrefix(prefix))
		for _, closed := range []bool{true, false} {
			key := fmt.Sprintf("closed=%v", closed)
			rdb := newClient()
			holder := core.New(rdb, patient, core.WithPrefix(prefix))
			start := time.Now()
			r := concReserve(t, holder, key, limits, 2)
			check(t, "the holder takes both slots", r.Result(), true, 0)
			if closed {
				if err := rdb.Close(); err != nil {
					t.Fatal(err)
				}
				if err := r.Release(ctx); err == nil || errors.Is(err, core.ErrSettled) {
					t.Fatalf("Release on a closed client: %v, want its error", err)
				}
				if err := r.Release(ctx); !errors.Is(err, core.ErrSettled) {
					t.Fatalf("a second Release: %v, want ErrSettled", err)
				}
			}
			admitted, denials := awaitFree(t, live, key, limits, start, lease)
			t.Logf("%s: admitted again %v after the holder's lease of %v began (%d denials before)", key, admitted, lease, denials)
		}
	})
}

// TestConcurrencyDenyCache: the deny cache stays exact. A denied Reserve
// is answered from the cache, sending nothing; a Release through the same
// Limiter lets the next Reserve through at once, mixed limits included;
// a Release through another Limiter takes effect within the cache's max
// age. On the world's clock, to the microsecond.
func TestConcurrencyDenyCache(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, w *world) {
		const maxAge = 100 * time.Millisecond
		h := &scriptCalls{prefix: w.prefix}
		rdb := w.newClient()
		rdb.AddHook(h)
		opts := append(w.opts[:len(w.opts):len(w.opts)], core.WithDenyCacheMaxAge(maxAge))
		lim := core.New(rdb, opts...)
		other := core.New(w.newClient(), opts...)
		l := concLimit(t, "2 concurrent lease=1h")
		limits := []core.Limit{l}

		a := concReserve(t, lim, "k", limits, 1)
		concReserve(t, lim, "k", limits, 1)
		d := concReserve(t, lim, "k", limits, 1).Result()
		checkDenied(t, "full", d, 0, time.Hour)
		if d.Cached {
			t.Fatal("Redis's own denial is marked Cached")
		}
		sent := h.n.Load()
		for i := 0; i < 3; i++ {
			res := concReserve(t, lim, "k", limits, 1).Result()
			if !res.Cached || res.Allowed || res.RetryAfter != d.RetryAfter {
				t.Fatalf("asked again: %+v, want the cached denial %+v", res, d)
			}
		}
		if n := h.n.Load() - sent; n != 0 {
			t.Fatalf("cached denials sent %d script calls", n)
		}
		release(t, a)
		res := concReserve(t, lim, "k", limits, 1).Result()
		if !res.Allowed || res.Cached {
			t.Fatalf("right after a Release through the same Limiter: %+v, want allowed by Redis", res)
		}

		// Mixed limits: the cached denial holds both keys; releasing the
		// slot clears it.
		mixed := mustLimits(t, "10/h, 1 concurrent lease=1h")
		m := concReserve(t, lim, "m", mixed, 1)
		concReserve(t, lim, "m", mixed, 1)
		if res := concReserve(t, lim, "m", mixed, 1).Result(); !res.Cached || res.Allowed {
			t.Fatalf("mixed, asked again: %+v, want a cached denial", res)
		}
		release(t, m)
		m = concReserve(t, lim, "m", mixed, 1)
		if res := m.Result(); !res.Allowed || res.Cached {
			t.Fatalf("mixed, after a Release: %+v, want allowed by Redis", res)
		}
		// The concurrency limit alone is another decision with its own
		// cache entry; the mixed Reservation's Release clears it too.
		alone := mixed[1:]
		concReserve(t, lim, "m", alone, 1)
		if res := concReserve(t, lim, "m", alone, 1).Result(); !res.Cached || res.Allowed {
			t.Fatalf("alone, asked again: %+v, want a cached denial", res)
		}
		release(t, m)
		if res := concReserve(t, lim, "m", alone, 1).Result(); !res.Allowed || res.Cached {
			t.Fatalf("alone, after the mixed Reservation's Release: %+v, want allowed by Redis", res)
		}

		// Through another Limiter: the cache answers at most maxAge.
		x := concReserve(t, other, "o", limits, 1)
		concReserve(t, other, "o", limits, 1)
		checkDenied(t, "full through another", concReserve(t, lim, "o", limits, 1).Result(), 0, time.Hour)
		release(t, x)
		if res := concReserve(t, lim, "o", limits, 1).Result(); !res.Cached || res.Allowed {
			t.Fatalf("released elsewhere, at once: %+v, want the cached denial", res)
		}
		w.advance(maxAge - time.Microsecond)
		if res := concReserve(t, lim, "o", limits, 1).Result(); !res.Cached || res.Allowed {
			t.Fatalf("released elsewhere, 1µs before max age: %+v, want the cached denial", res)
		}
		w.advance(time.Microsecond)
		if res := concReserve(t, lim, "o", limits, 1).Result(); !res.Allowed || res.Cached {
			t.Fatalf("released elsewhere, at max age %v: %+v, want allowed by Redis", maxAge, res)
		}
	})
}

// TestConcurrencyDenyCacheRealTime: in real time on a real Redis, a slot
// released through another Limiter is admitted here within the deny
// cache's max age (and a scheduling margin).
func TestConcurrencyDenyCacheRealTime(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	const maxAge = 100 * time.Millisecond
	prefix := uniquePrefix()
	opts := []core.Option{patient, core.WithPrefix(prefix), core.WithDenyCacheMaxAge(maxAge)}
	lim, other := core.New(srv.Client(t), opts...), core.New(srv.Client(t), opts...)
	l := concLimit(t, "1 concurrent lease=1m")
	limits := []core.Limit{l}

	x := concReserve(t, other, "k", limits, 1)
	checkDenied(t, "held elsewhere", concReserve(t, lim, "k", limits, 1).Result(), 0, time.Minute)
	released := time.Now()
	release(t, x)
	cached := 0
	for {
		res := concReserve(t, lim, "k", limits, 1).Result()
		if res.Allowed {
			break
		}
		if res.Cached {
			cached++
		}
		if time.Since(released) > maxAge+time.Second {
			t.Fatalf("still denied %v after a Release elsewhere; max age %v: %+v", time.Since(released), maxAge, res)
		}
		time.Sleep(2 * time.Millisecond)
	}
	took := time.Since(released)
	t.Logf("released elsewhere: admitted here after %v (%d cached denials meanwhile)", took, cached)
	if took > maxAge+400*time.Millisecond {
		t.Fatalf("released elsewhere: admitted here after %v, want within max age %v (and a margin)", took, maxAge)
	}
}

// TestConcurrencyReleaseWhileStopped: a Release sent while Redis is
// stopped (SIGSTOP) returns ErrTimeout by its 50 ms timeout; it is sent
// at most once (its slot's release may be retried: that frees the same
// slot), so after Redis resumes it frees its own slot and no other
// (another Reservation's stays held); a second Release is ErrSettled; the
// Limiter's goroutines go away. Not parallel: it counts goroutines.
func TestConcurrencyReleaseWhileStopped(t *testing.T) {
	srv := redistest.Standalone(t)
	baseline := takeGoroutines()
	ctx := context.Background()
	prefix := uniquePrefix()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	const timeout = 50 * time.Millisecond
	lim := core.New(rdb, core.WithPrefix(prefix), core.WithTimeout(timeout), core.WithLinger(10*time.Millisecond))
	peek := core.New(srv.Client(t), patient, core.WithPrefix(prefix), core.WithLinger(10*time.Millisecond))
	l := concLimit(t, "3 concurrent lease=1m")
	limits := []core.Limit{l}

	a := concReserve(t, lim, "k", limits, 1)
	b := concReserve(t, lim, "k", limits, 1)
	check(t, "a and b", b.Result(), true, 1)

	// From here, ZREM runs only in a settlement's script (a decision
	// trims with ZREMRANGEBYSCORE): commandstats counts settlements that ran.
	admin := srv.Client(t)
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	began := time.Now()
	err := a.Release(ctx)
	took := time.Since(began)
	srv.Resume()
	if !errors.Is(err, core.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Release while Redis is stopped: %v, want ErrTimeout (and DeadlineExceeded)", err)
	}
	if took > timeout+400*time.Millisecond {
		t.Fatalf("Release while Redis is stopped took %v; its timeout is %v", took, timeout)
	}
	if err := a.Release(ctx); !errors.Is(err, core.ErrSettled) {
		t.Fatalf("a second Release: %v, want ErrSettled", err)
	}
	if err := a.Settle(ctx, 0); !errors.Is(err, core.ErrSettled) {
		t.Fatalf("a Settle after it: %v, want ErrSettled", err)
	}

	// The Release that timed out reaches Redis once it runs again: a's slot
	// is freed, b's stays.
	deadline := time.Now().Add(3 * time.Second)
	free := freeSlots(t, peek, "k", l)
	for free != l.Rate-1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		free = freeSlots(t, peek, "k", l)
	}
	if free != l.Rate-1 {
		t.Fatalf("after Redis resumed: %d slots free, want %d (a's freed, b's held)", free, l.Rate-1)
	}
	time.Sleep(200 * time.Millisecond)
	if free := freeSlots(t, peek, "k", l); free != l.Rate-1 {
		t.Fatalf("a while later: %d slots free, want %d: b's slot was freed too", free, l.Rate-1)
	}
	stats, statsErr := redistest.CommandStats(ctx, admin)
	if statsErr != nil {
		t.Fatal(statsErr)
	}
	// The settlement, and the release of its slot the Limiter retries in
	// the background (it frees the same slot, idempotently).
	if n := stats["zrem"].Calls; n < 1 || n > 2 {
		t.Fatalf("the settlement ran %v times, want once, and once more its retried release at most", n)
	}
	t.Logf("Release while stopped: %v after %v; its settlement (and its retried release) ran %v times once Redis resumed; %+v",
		err, took, stats["zrem"].Calls, lim.Stats())
	release(t, b)
	if free := freeSlots(t, peek, "k", l); free != l.Rate {
		t.Fatalf("b released: %d free, want %d", free, l.Rate)
	}
	checkGoroutines(t, lim, baseline)
}

// TestConcurrencyBatched: 64 goroutines reserve and release on one
// Limiter at once, their decisions and settlements sharing round trips:
// no errors, and the counts are exact. On a key each, each goroutine's
// slot is its own; on one key of 64 slots all are admitted at once; on
// one key of 8, never more than 8 are in flight. Every call goes to Redis
// exactly once.
func TestConcurrencyBatched(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	rdb := srv.Client(t)
	h := &roundTrips{}
	rdb.AddHook(h)
	prefix := uniquePrefix()
	lim := core.New(rdb, patient, core.WithPrefix(prefix))
	ctx := context.Background()
	const goroutines = 64
	var sent atomic.Int64 // calls that must reach Redis: Reserves not cached, Releases
	run := func(t *testing.T, iterations int, body func(g, i int) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, goroutines)
		deadline := time.Now().Add(5 * time.Second)
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < iterations && time.Now().Before(deadline); i++ {
					if err := body(g, i); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	take := func(key string, l core.Limit) (*core.Reservation, error) {
		r, err := lim.Reserve(ctx, key, []core.Limit{l}, 1)
		if err == nil && !r.Result().Cached {
			sent.Add(1)
		}
		return r, err
	}
	give := func(r *core.Reservation) error {
		sent.Add(1)
		return r.Release(ctx)
	}
	// Warm the scripts up (NOSCRIPT calls are not counted anyway).
	warm := concLimit(t, "1 concurrent")
	r, err := take("warm", warm)
	if err != nil {
		t.Fatal(err)
	}
	if err := give(r); err != nil {
		t.Fatal(err)
	}
	h.reset()
	sent.Store(0)

	// A key each: each goroutine's slot is its own, taken and freed 20 times.
	one := concLimit(t, "1 concurrent")
	var ownAdmitted atomic.Int64
	run(t, 20, func(g, i int) error {
		key := fmt.Sprintf("own%d", g)
		r, err := take(key, one)
		if err != nil {
			return err
		}
		if res := r.Result(); !res.Allowed || res.Remaining != 0 {
			return fmt.Errorf("%s, iteration %d: %+v, want allowed: the slot is this goroutine's", key, i, res)
		}
		ownAdmitted.Add(1)
		again, err := take(key, one)
		if err != nil {
			return err
		}
		if again.Result().Allowed {
			return fmt.Errorf("%s, iteration %d: a second slot of 1 admitted", key, i)
		}
		return give(r)
	})
	if n := ownAdmitted.Load(); n != goroutines*20 {
		t.Fatalf("a key each: %d admitted, want %d", n, goroutines*20)
	}

	// One key of 64: all are admitted at once, a 65th is not; each round
	// releases them all.
	all := concLimit(t, "64 concurrent lease=1m")
	for round := 0; round < 3; round++ {
		held := make([]*core.Reservation, goroutines)
		run(t, 1, func(g, _ int) error {
			r, err := take("all", all)
			if err != nil {
				return err
			}
			if !r.Result().Allowed {
				return fmt.Errorf("round %d: %+v, want every one of 64 admitted", round, r.Result())
			}
			held[g] = r
			return nil
		})
		if res := concReserve(t, lim, "all", []core.Limit{all}, 1).Result(); res.Allowed {
			t.Fatalf("round %d: a 65th of 64 admitted", round)
		} else if !res.Cached {
			sent.Add(1)
		}
		run(t, 1, func(g, _ int) error { return give(held[g]) })
		if free := freeSlots(t, lim, "all", all); free != all.Rate {
			t.Fatalf("round %d: all released, %d of %d free", round, free, all.Rate)
		}
		sent.Add(1) // the peek
	}

	// One key of 8: never more than 8 in flight.
	eight := concLimit(t, "8 concurrent lease=1m")
	var inFlight, most, admitted, denied atomic.Int64
	run(t, 30, func(g, i int) error {
		r, err := take("eight", eight)
		if err != nil {
			return err
		}
		if !r.Result().Allowed {
			denied.Add(1)
			time.Sleep(time.Duration(g%3) * 100 * time.Microsecond)
			return nil
		}
		admitted.Add(1)
		raise(&most, inFlight.Add(1))
		time.Sleep(time.Duration(i%3) * 500 * time.Microsecond)
		inFlight.Add(-1)
		return give(r)
	})
	t.Logf("8 slots, 64 goroutines: %d admitted, %d denied, at most %d in flight", admitted.Load(), denied.Load(), most.Load())
	if most.Load() > int64(eight.Rate) {
		t.Fatalf("%d in flight under %v", most.Load(), eight)
	}
	if admitted.Load() == 0 || denied.Load() == 0 {
		t.Fatalf("%d admitted, %d denied: want some of each", admitted.Load(), denied.Load())
	}
	if free := freeSlots(t, lim, "eight", eight); free != eight.Rate {
		t.Fatalf("all released: %d of %d free", free, eight.Rate)
	}
	sent.Add(1)

	t.Logf("%d calls in %d round trips (%d shared, %d batch script calls, largest %d)",
		h.decisions.Load(), h.trips.Load(), h.shared.Load(), h.batchCalls.Load(), h.largest.Load())
	if got, want := h.decisions.Load(), sent.Load(); got != want {
		t.Fatalf("%d script calls ran for %d sent: each must run exactly once", got, want)
	}
	if h.shared.Load() == 0 {
		t.Error("no round trip carried more than one call: nothing was batched")
	}
}
