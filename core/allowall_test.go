package core_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// Several limits, one decision: AllowAll, Decide with terms, DecideEach.
// The behaviour suite runs every algorithm paired with another through
// DecideEach; these tests pin down what is particular to several limits.

// miniLimiter is a Limiter on a miniredis of its own, on a fake client
// clock.
func miniLimiter(t *testing.T, opts ...core.Option) (*core.Limiter, *miniredis.Miniredis, *fakeClock) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	clock := &fakeClock{now: t0}
	return core.New(rdb, append([]core.Option{patient, core.WithClock(clock.Now)}, opts...)...), m, clock
}

func allowAll(t *testing.T, lim *core.Limiter, key string, limits []core.Limit, n int) core.Result {
	t.Helper()
	res, err := lim.AllowAll(context.Background(), key, limits, n)
	if err != nil {
		t.Fatalf("AllowAll(%q, %s, %d): %v", key, core.FormatLimits(limits), n, err)
	}
	return res
}

func mustLimits(t *testing.T, s string) []core.Limit {
	t.Helper()
	limits, err := core.ParseLimits(s)
	if err != nil {
		t.Fatal(err)
	}
	return limits
}

// TestAllowAllAllOrNothing: a token bucket for bursts and a fixed window as
// a quota. Each denies in turn; a denial by one charges neither.
func TestAllowAllAllOrNothing(t *testing.T) {
	t.Parallel()
	lim, _, clock := miniLimiter(t, core.WithDenyCache(0))
	limits := mustLimits(t, "10/s token_bucket burst=20, 30/h fixed_window")
	bucket, quota := limits[0], limits[1]
	peek := func(l core.Limit) int { return allowN(t, lim, "k", l, 0).Remaining }

	// The bucket binds first: 20 at once, then denied.
	for i := 1; i <= 20; i++ {
		res := allowAll(t, lim, "k", limits, 1)
		check(t, fmt.Sprintf("request %d", i), res, true, 20-i)
		if res.Limit != bucket {
			t.Fatalf("request %d: binding limit %v, want the bucket (fewest remaining)", i, res.Limit)
		}
	}
	res := allowAll(t, lim, "k", limits, 1)
	check(t, "bucket empty", res, false, 0)
	if res.Limit != bucket || res.RetryAfter != 100*time.Millisecond {
		t.Fatalf("denied by %v after %v; want the bucket, 100ms", res.Limit, res.RetryAfter)
	}
	if got := peek(quota); got != 10 {
		t.Fatalf("quota has %d left, want 10: the bucket's denial charged it", got)
	}

	// A second later the bucket has 10 again; the quota has 10 left. A cost
	// of 11 fits neither, and is charged to neither.
	clock.Advance(time.Second)
	res = allowAll(t, lim, "k", limits, 11)
	if res.Allowed {
		t.Fatalf("cost 11 with 10 in each: %+v", res)
	}
	if got, want := peek(bucket), 10; got != want {
		t.Fatalf("bucket has %d, want %d", got, want)
	}
	// The quota binds now: 10 pass, then it denies though the bucket has room.
	check(t, "cost 10", allowAll(t, lim, "k", limits, 10), true, 0)
	clock.Advance(time.Second)
	res = allowAll(t, lim, "k", limits, 1)
	if res.Allowed || res.Limit != quota {
		t.Fatalf("quota spent: %+v, want denied by the quota", res)
	}
	if got := peek(bucket); got != 10 {
		t.Fatalf("bucket has %d after the quota's denial, want 10: the denial charged it", got)
	}
	// ResetAfter is the longest: the quota's window, most of an hour.
	if res.ResetAfter < 59*time.Minute {
		t.Fatalf("ResetAfter %v, want the quota's (about an hour)", res.ResetAfter)
	}
}

// TestAllowAllBinding: among several denying limits the binding one has
// the longest RetryAfter; allowed, the one with the fewest Remaining.
// DecideEach reports each limit, and the limits that would have allowed
// report their state unchanged.
func TestAllowAllBinding(t *testing.T) {
	t.Parallel()
	lim, _, _ := miniLimiter(t)
	fast, slow, loose := core.PerSecond(2), core.Limit{Algorithm: core.FixedWindow, Rate: 2, Period: time.Hour}, core.PerMinute(100)
	limits := []core.Limit{loose, fast, slow}
	ctx := context.Background()
	each := make([]core.Result, 3)

	res, _, err := lim.DecideEach(ctx, "k", nil, limits, 1, each)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Allowed || res.Remaining != 1 || res.Limit != fast {
		t.Fatalf("first: %+v; want allowed, the first of the two 2-limits (fewest remaining, 1)", res)
	}
	if got := fmt.Sprint(each[0].Remaining, each[1].Remaining, each[2].Remaining); got != "99 1 1" {
		t.Fatalf("each Remaining: %s, want 99 1 1", got)
	}
	check(t, "second", allowAll(t, lim, "k", limits, 1), true, 0)

	res, _, err = lim.DecideEach(ctx, "k", nil, limits, 1, each)
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed || res.Limit != slow || res.RetryAfter != time.Hour {
		t.Fatalf("both 2-limits deny: %+v; want the window's hour", res)
	}
	if each[1].Allowed || each[2].Allowed || !each[0].Allowed {
		t.Fatalf("each: %+v; want the loose limit allowing, the two others denying", each)
	}
	if each[0].Remaining != 98 || each[0].RetryAfter != 0 {
		t.Fatalf("the loose limit reports %+v; want its state as it stays, 98 remaining", each[0])
	}
	if res.ResetAfter != time.Hour {
		t.Fatalf("ResetAfter %v, want the longest, an hour", res.ResetAfter)
	}
}

// TestAllowAllSameStateAlone: a limit's state is the same whether decided
// alone or with others, in either order.
func TestAllowAllSameStateAlone(t *testing.T) {
	t.Parallel()
	lim, _, _ := miniLimiter(t)
	limits := mustLimits(t, "5/m sliding_log, 100/h leaky_bucket, 7/h gcra")
	for i := 0; i < 2; i++ {
		allowN(t, lim, "k", limits[0], 1)
		allowAll(t, lim, "k", limits, 1)
	}
	check(t, "sliding log alone", allowN(t, lim, "k", limits[0], 0), true, 1)
	check(t, "leaky bucket alone", allowN(t, lim, "k", limits[1], 0), true, 98)
	check(t, "gcra alone", allowN(t, lim, "k", limits[2], 0), true, 5)
	check(t, "together", allowAll(t, lim, "k", limits, 1), true, 0)
	check(t, "the log is spent", allowAll(t, lim, "k", limits, 1), false, 0)
}

// TestAllowAllErrors: what cannot be decided together is an error, and
// nothing is sent or written.
func TestAllowAllErrors(t *testing.T) {
	t.Parallel()
	lim, m, _ := miniLimiter(t)
	ctx := context.Background()
	many := make([]core.Limit, core.MaxLimits+1)
	for i := range many {
		many[i] = core.Limit{Rate: 1, Period: time.Duration(i+1) * time.Second}
	}
	for _, c := range []struct {
		name   string
		limits []core.Limit
		n      int
		want   error
	}{
		{"none", nil, 1, core.ErrInvalidLimit},
		{"too many", many, 1, core.ErrInvalidLimit},
		{"same algorithm and period", []core.Limit{core.PerSecond(1), core.PerSecond(5)}, 1, core.ErrInvalidLimit},
		{"same period, gcra spelled two ways", []core.Limit{core.PerSecond(1), {Algorithm: core.GCRA, Rate: 9, Period: time.Second}}, 1, core.ErrInvalidLimit},
		{"shaping and policing leaky buckets share state", []core.Limit{
			{Algorithm: core.LeakyBucket, Rate: 1, Period: time.Second},
			{Algorithm: core.LeakyBucket, Rate: 2, Period: time.Second, Shape: true}}, 1, core.ErrInvalidLimit},
		{"an invalid limit", []core.Limit{core.PerSecond(1), {Rate: 0, Period: time.Second}}, 1, core.ErrInvalidLimit},
		{"negative cost", []core.Limit{core.PerSecond(1), core.PerMinute(1)}, -1, core.ErrInvalidCost},
	} {
		if _, err := lim.AllowAll(ctx, "k", c.limits, c.n); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := lim.AllowAll(ctx, "", []core.Limit{core.PerSecond(1)}, 1); !errors.Is(err, core.ErrInvalidKey) {
		t.Errorf("empty key: %v, want ErrInvalidKey", err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Fatalf("errors wrote %v", keys)
	}

	// Stepped and continuous token buckets keep their own state: allowed.
	both := []core.Limit{{Algorithm: core.TokenBucket, Rate: 1, Period: time.Second},
		{Algorithm: core.TokenBucket, Rate: 1, Period: time.Second, Stepped: true}}
	check(t, "stepped and continuous", allowAll(t, lim, "k", both, 1), true, 0)

	// A cost above one limit's burst is never allowed and writes nothing.
	limits := []core.Limit{core.PerMinute(100), core.PerSecond(3)}
	res := allowAll(t, lim, "fresh", limits, 4)
	if res.Allowed || res.RetryAfter != core.InfDuration || res.Limit != limits[1] || res.Remaining != 3 {
		t.Fatalf("cost 4 over a burst of 3: %+v", res)
	}
	for _, k := range m.Keys() {
		if strings.Contains(k, "{fresh}") {
			t.Fatalf("a cost above a burst wrote %s", k)
		}
	}
}

// TestParseLimits: the grammar, its round trip, and its errors.
func TestParseLimits(t *testing.T) {
	t.Parallel()
	limits, err := core.ParseLimits(" 10/s ,1000/h fixed_window,  20/s token_bucket burst=40 ")
	if err != nil {
		t.Fatal(err)
	}
	want := []core.Limit{core.PerSecond(10), {Algorithm: core.FixedWindow, Rate: 1000, Period: time.Hour},
		{Algorithm: core.TokenBucket, Rate: 20, Period: time.Second, Burst: 40}}
	if fmt.Sprint(limits) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", limits, want)
	}
	s := core.FormatLimits(limits)
	if s != "10/s, 1000/h fixed_window, 20/s token_bucket burst=40" {
		t.Fatalf("FormatLimits: %q", s)
	}
	if back, err := core.ParseLimits(s); err != nil || fmt.Sprint(back) != fmt.Sprint(limits) {
		t.Fatalf("round trip: %v, %v", back, err)
	}
	for _, c := range []struct{ in, says string }{
		{"", "limit 1 of 1 is empty"},
		{"10/s,", "limit 2 of 2 is empty"},
		{", 10/s", "limit 1 of 2 is empty"},
		{"10/s, 20/s", "would share state"},
		{"10/s, 5/x", "period"},
	} {
		_, err := core.ParseLimits(c.in)
		if !errors.Is(err, core.ErrInvalidLimit) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ParseLimits(%q): %v, want ErrInvalidLimit saying %q", c.in, err, c.says)
		}
	}
}

// TestScopes: a scope keeps its own state for the same key and limit,
// outside the hash tag; one identity's keys of every scope and limit share
// one Cluster slot.
func TestScopes(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t, 3)
	rdb := cl.Client(t)
	prefix := uniquePrefix()
	lim := core.New(rdb, patient, core.WithPrefix(prefix))
	ctx := context.Background()
	global, hourly, login := core.PerMinute(100), core.Limit{Algorithm: core.FixedWindow, Rate: 1000, Period: time.Hour}, core.PerMinute(100)
	for _, id := range []string{"203.0.113.7", "198.51.100.1", "a}b{c", "user:42"} {
		scopes, limits := []string{"api", "api", "POST /login {x}"}, []core.Limit{global, hourly, login}
		each := make([]core.Result, 3)
		if res, _, err := lim.DecideEach(ctx, id, scopes, limits, 3, each); err != nil || !res.Allowed {
			t.Fatalf("%s: %+v, %v", id, res, err)
		}
		for i, scope := range scopes {
			alone, _, err := lim.DecideEach(ctx, id, []string{scope}, limits[i:i+1], 0, nil)
			if err != nil || alone.Remaining != limits[i].Rate-3 {
				t.Fatalf("%s: %v in scope %q after a cost of 3: %+v, %v; two scopes of one limit share state", id, limits[i], scope, alone, err)
			}
		}
		var keys []string
		err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			found, err := c.Keys(ctx, prefix+"*").Result()
			for _, k := range found {
				if strings.Contains(k, "{"+strings.ReplaceAll(id, "}", "%7D")+"}") {
					keys = append(keys, k)
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) != 3 {
			t.Fatalf("%s: keys %v, want 3", id, keys)
		}
		slots := map[int64]bool{}
		for _, k := range keys {
			slots[rdb.ClusterKeySlot(ctx, k).Val()] = true
		}
		if len(slots) != 1 {
			t.Fatalf("%s: keys %v in slots %v, want one", id, keys, slots)
		}
	}
	if _, _, err := lim.DecideEach(ctx, "k", []string{"a", "a"}, []core.Limit{global, login}, 1, nil); !errors.Is(err, core.ErrInvalidLimit) {
		t.Fatalf("one limit twice in one scope: %v, want ErrInvalidLimit", err)
	}
	if err := lim.ResetScope(ctx, "POST /login {x}", "user:42", login); err != nil {
		t.Fatal(err)
	}
	if res, _, _ := lim.DecideEach(ctx, "user:42", []string{"POST /login {x}"}, []core.Limit{login}, 0, nil); res.Remaining != 100 {
		t.Fatalf("after ResetScope: %+v, want the full 100", res)
	}
	if res := allowN(t, lim, "user:42", global, 0); res.Remaining != 100 {
		t.Fatalf("the unscoped state of the key: %+v; scopes must keep apart from it", res)
	}
}

// TestAllowAllDenyCache: a denied decision of several limits is answered
// locally, each limit's result included; a Reset of any one of its limits
// makes the entry stale, also when it lands while a decision is in flight.
func TestAllowAllDenyCache(t *testing.T) {
	t.Parallel()
	lim, _, clock := miniLimiter(t)
	ctx := context.Background()
	limits := mustLimits(t, "2/h, 100/m fixed_window")
	allowAll(t, lim, "k", limits, 2)
	each := make([]core.Result, 2)
	first, _, err := lim.DecideEach(ctx, "k", nil, limits, 1, each)
	if err != nil || first.Allowed || first.Cached {
		t.Fatalf("denial from Redis: %+v, %v", first, err)
	}
	clock.Advance(500 * time.Millisecond) // within DefaultDenyCacheMaxAge
	res, _, err := lim.DecideEach(ctx, "k", nil, limits, 1, each)
	if err != nil || !res.Cached || res.Allowed || res.Limit != limits[0] {
		t.Fatalf("second: %+v, %v; want a cached denial by 2/h", res, err)
	}
	if want := first.RetryAfter - 500*time.Millisecond; res.RetryAfter != want {
		t.Fatalf("cached RetryAfter %v, want %v counted down", res.RetryAfter, want)
	}
	if !each[1].Allowed || each[1].Remaining != 98 || !each[1].Cached {
		t.Fatalf("the fixed window's cached result: %+v", each[1])
	}
	// The same limits in another order, or at a lower cost, are not the
	// same decision.
	if res := allowAll(t, lim, "k", []core.Limit{limits[1], limits[0]}, 1); res.Cached || res.Allowed {
		t.Fatalf("other order: %+v, want a denial from Redis", res)
	}
	// Resetting the fixed window alone frees nothing, but the entry holds
	// its state, so it goes; resetting the binding limit admits at once.
	if err := lim.Reset(ctx, "k", limits[1]); err != nil {
		t.Fatal(err)
	}
	if res := allowAll(t, lim, "k", limits, 1); res.Cached || res.Allowed {
		t.Fatalf("after resetting the window: %+v, want a fresh denial", res)
	}
	if err := lim.Reset(ctx, "k", limits[0]); err != nil {
		t.Fatal(err)
	}
	check(t, "after resetting the binding limit", allowAll(t, lim, "k", limits, 1), true, 1)
}

// TestAllowAllExact: several app instances hammer one key with two limits
// of different algorithms; exactly the binding limit's allowance passes,
// and the other limit is charged for admitted requests only, on every
// backend, with batching and the deny cache on (the defaults).
func TestAllowAllExact(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			w := b.start(t)(t)
			for _, c := range []struct {
				name         string
				limits       string
				admit, other int // the binding limit's allowance; the other's
			}{
				{"gcra binds", "100/h, 1000/h fixed_window", 100, 1000},
				{"sliding log binds", "1000/h token_bucket, 60/h sliding_log", 60, 1000},
			} {
				limits := mustLimits(t, c.limits)
				admitted := hammerAll(t, w, "hot-"+c.name, limits, 3*c.admit)
				if admitted != int64(c.admit) {
					t.Fatalf("%s: %d admitted, want exactly %d", c.name, admitted, c.admit)
				}
				lim := w.limiter()
				for _, l := range limits {
					res := allowN(t, lim, "hot-"+c.name, l, 0)
					if want := l.Capacity() - c.admit; res.Remaining != want {
						t.Fatalf("%s: %v has %d left, want %d: charged for denied requests", c.name, l, res.Remaining, want)
					}
				}
			}
		})
	}
}

// hammerAll runs at least `attempts` AllowAll decisions from 4 instances x
// 8 goroutines on key and returns how many were admitted.
func hammerAll(t *testing.T, w *world, key string, limits []core.Limit, attempts int) int64 {
	t.Helper()
	const instances, goroutines = 4, 8
	lims := make([]*core.Limiter, instances)
	for i := range lims {
		lims[i] = w.limiter()
	}
	each := (attempts + instances*goroutines - 1) / (instances * goroutines)
	return decideFrom(t, instances*goroutines, each, func(g, _ int) (core.Result, error) {
		return lims[g%instances].AllowAll(context.Background(), key, limits, 1)
	})
}
