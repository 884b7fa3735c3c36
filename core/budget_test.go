package core_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestReserveEach: requests and tokens in one decision. A request either
// limit denies is charged to neither; SettleEach moves only the limits
// whose cost changed; the contract's errors leave the reservation open.
func TestReserveEach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lim, _, _ := miniLimiter(t, core.WithDenyCache(0))
	limits := mustLimits(t, "3/m, 100/m unit=tokens")
	requests, tokens := limits[0], limits[1]
	left := func() (int, int) {
		return allowN(t, lim, "k", requests, 0).Remaining, allowN(t, lim, "k", tokens, 0).Remaining
	}
	want := func(what string, r, tk int) {
		t.Helper()
		if gr, gt := left(); gr != r || gt != tk {
			t.Fatalf("%s: %d requests and %d tokens left, want %d and %d", what, gr, gt, r, tk)
		}
	}

	a, err := lim.ReserveEach(ctx, "k", limits, []int{1, 40})
	if err != nil || !a.Result().Allowed {
		t.Fatalf("ReserveEach 1 request, 40 tokens: %+v, %v", a, err)
	}
	want("one request of 40 tokens", 2, 60)
	denied, err := lim.ReserveEach(ctx, "k", limits, []int{1, 70})
	if err != nil || denied.Result().Allowed || denied.Result().Limit != tokens {
		t.Fatalf("ReserveEach of 70 tokens with 60 left: %+v, %v; want denied by the tokens", denied.Result(), err)
	}
	want("a request the tokens denied is charged to neither", 2, 60)
	if err := denied.SettleEach(ctx, []int{1, 5}); err != nil {
		t.Fatalf("SettleEach of a denied reservation: %v, want nil", err)
	}

	// Refused, and the reservation stays open.
	for _, bad := range [][]int{{1}, {1, 2, 3}, {1, -1}, {0, aboveMaxCount}} {
		if err := a.SettleEach(ctx, bad); !errors.Is(err, core.ErrInvalidCost) {
			t.Fatalf("SettleEach(%v): %v, want ErrInvalidCost", bad, err)
		}
	}
	if err := a.Settle(ctx, 10); !errors.Is(err, core.ErrInvalidCost) {
		t.Fatalf("Settle of a reservation of a cost per limit: %v, want ErrInvalidCost (use SettleEach)", err)
	}
	want("refused settlements change nothing", 2, 60)
	if err := a.SettleEach(ctx, []int{1, 10}); err != nil { // 30 tokens back, the request stands
		t.Fatal(err)
	}
	want("settling the tokens leaves the request limit untouched", 2, 90)
	if err := a.SettleEach(ctx, []int{1, 10}); !errors.Is(err, core.ErrSettled) {
		t.Fatalf("a second SettleEach: %v, want ErrSettled", err)
	}

	// A charge into debt: a cost of 0 for a limit in debt still denies.
	b, err := lim.ReserveEach(ctx, "k", limits, []int{1, 50})
	if err != nil || !b.Result().Allowed {
		t.Fatalf("ReserveEach 1, 50: %+v, %v", b, err)
	}
	if err := b.SettleEach(ctx, []int{1, 200}); err != nil { // 150 more tokens: 110 in debt
		t.Fatal(err)
	}
	res, err := lim.ReserveEach(ctx, "k", limits, []int{1, 0})
	if err != nil || res.Result().Allowed || res.Result().Limit != tokens || res.Result().RetryAfter <= 0 {
		t.Fatalf("a request of no tokens while the tokens are in debt: %+v, %v; want denied by the tokens", res.Result(), err)
	}
	if r, _ := left(); r != 1 {
		t.Fatalf("%d requests left after a denial, want 1", r)
	}

	// Release lets each limit's reserved cost stand; Reserve's Settle is
	// ReserveEach's with equal costs.
	c, err := lim.ReserveEach(ctx, "j", limits, []int{2, 2})
	if err != nil || !c.Result().Allowed {
		t.Fatal(c, err)
	}
	if err := c.Settle(ctx, 1); err != nil {
		t.Fatalf("Settle of equal costs: %v", err)
	}
	d, err := lim.ReserveEach(ctx, "j", limits, []int{1, 30})
	if err != nil || !d.Result().Allowed {
		t.Fatal(d, err)
	}
	if err := d.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r, tk := allowN(t, lim, "j", requests, 0).Remaining, allowN(t, lim, "j", tokens, 0).Remaining; r != 1 || tk != 69 {
		t.Fatalf("after Settle(1) of {2, 2} and Release of {1, 30}: %d requests, %d tokens left; want 1 and 69", r, tk)
	}

	if _, err := lim.ReserveEach(ctx, "k", limits, []int{1}); !errors.Is(err, core.ErrInvalidCost) {
		t.Fatalf("ReserveEach with one cost for two limits: %v, want ErrInvalidCost", err)
	}
	if _, err := lim.ReserveEach(ctx, "k", limits, []int{1, -2}); !errors.Is(err, core.ErrInvalidCost) {
		t.Fatalf("ReserveEach with a negative cost: %v, want ErrInvalidCost", err)
	}
}

// TestReserveEachSlots: a Concurrency limit in ReserveEach holds its own
// cost in slots; 0 holds none.
func TestReserveEachSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lim, _, _ := miniLimiter(t, core.WithDenyCache(0))
	limits := mustLimits(t, "100/m unit=tokens, 2 concurrent")
	a, err := lim.ReserveEach(ctx, "k", limits, []int{10, 2})
	if err != nil || !a.Result().Allowed {
		t.Fatal(a, err)
	}
	if b, err := lim.ReserveEach(ctx, "k", limits, []int{10, 1}); err != nil || b.Result().Allowed {
		t.Fatalf("a third slot: %+v, %v; want denied", b.Result(), err)
	}
	z, err := lim.ReserveEach(ctx, "k", limits, []int{10, 0})
	if err != nil || !z.Result().Allowed {
		t.Fatalf("no slot while both are held: %+v, %v; want allowed", z.Result(), err)
	}
	if err := a.SettleEach(ctx, []int{10, 2}); err != nil {
		t.Fatal(err)
	}
	if b, err := lim.ReserveEach(ctx, "k", limits, []int{10, 2}); err != nil || !b.Result().Allowed {
		t.Fatalf("two slots after the settlement freed them: %+v, %v", b.Result(), err)
	}
}

// TestReserveEachConcurrent: 4 Limiters on separate clients decide
// requests and tokens together, concurrently, and settle the tokens at
// their true cost: Redis counts exactly the requests admitted and the
// tokens they finally cost, never a denied request, and neither limit
// admits past its allowance.
func TestReserveEachConcurrent(t *testing.T) {
	t.Parallel()
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		m := miniredis.RunT(t)
		testReserveEachConcurrent(t, func() redis.UniversalClient {
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			return c
		})
	})
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		s := redistest.Standalone(t)
		testReserveEachConcurrent(t, func() redis.UniversalClient { return s.Client(t) })
	})
}

func testReserveEachConcurrent(t *testing.T, newClient func() redis.UniversalClient) {
	admin := newClient()
	ctx := context.Background()
	prefix := uniquePrefix()
	// Windows of an hour: nothing comes back during the test, so every
	// count is exact.
	limits := mustLimits(t, "40/h fixed_window, 3000/h fixed_window unit=tokens")
	var lims []*core.Limiter
	for range 4 {
		lims = append(lims, core.New(newClient(), core.WithPrefix(prefix), patient))
	}
	var mu sync.Mutex
	requests, tokens, denied := 0, 0, 0
	var wg sync.WaitGroup
	deadline := time.Now().Add(10 * time.Second)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			lim := lims[g%len(lims)]
			for range 40 {
				if time.Now().After(deadline) {
					return
				}
				estimate, used := 50+rng.IntN(100), rng.IntN(200)
				r, err := lim.ReserveEach(ctx, "key", limits, []int{1, estimate})
				if err != nil {
					t.Error(err)
					return
				}
				if !r.Result().Allowed {
					mu.Lock()
					denied++
					mu.Unlock()
					continue
				}
				if err := r.SettleEach(ctx, []int{1, used}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				requests, tokens = requests+1, tokens+used
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	count := func(l core.Limit) int { // the window's count, debt included
		n, err := admin.HGet(ctx, stateKey(prefix, "key", l), "n").Int()
		if err != nil {
			t.Fatalf("the count of %v: %v", l, err)
		}
		return n
	}
	gotR, gotT := count(limits[0]), count(limits[1])
	t.Logf("%d requests admitted (%d denied), %d tokens used; Redis counts %d and %d", requests, denied, tokens, gotR, gotT)
	if requests > 40 {
		t.Errorf("%d requests admitted, above the limit of 40", requests)
	}
	if gotR != requests {
		t.Errorf("Redis counts %d requests, %d were admitted: a denied request was charged, or one was lost", gotR, requests)
	}
	if gotT != tokens {
		t.Errorf("Redis counts %d tokens, the admitted requests used %d", gotT, tokens)
	}
	if denied == 0 {
		t.Error("nothing was denied: the test did not reach either limit")
	}
}

// TestReserveUpTo: a limit that takes up to its cost (the root's
// Budget.TakeRest) takes what is left when less than its cost is, in the
// same atomic decision; is denied, charging nothing, when nothing is
// left, with a RetryAfter until one is back; and its settlement charges
// the true cost from what it took. With one limit and with two, under
// every algorithm that counts units, on miniredis and redis-server.
func TestReserveUpTo(t *testing.T) {
	t.Parallel()
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		testReserveUpTo(t, rdb)
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		testReserveUpTo(t, redistest.Standalone(t).Client(t))
	})
}

func testReserveUpTo(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	for _, alg := range []string{"gcra", "token_bucket", "fixed_window", "sliding_window", "sliding_log", "leaky_bucket"} {
		for _, withRequests := range []bool{false, true} {
			clock := &fakeClock{now: t0}
			lim := core.New(rdb, patient, core.WithClock(clock.Now), core.WithPrefix(alg+"-"+strconv.FormatBool(withRequests)+":"))
			spec, bit := "100/h unit=tokens "+alg, uint32(1)
			if withRequests {
				spec, bit = "10/h, "+spec, 2
			}
			limits := mustLimits(t, spec)
			i := len(limits) - 1
			costs := func(tokens int) []int {
				c := make([]int, len(limits))
				for j := range c {
					c[j] = 1
				}
				c[i] = tokens
				return c
			}
			what := alg + " " + spec
			c := costs(70)
			a, err := lim.ReserveUpTo(ctx, "k", limits, c, bit)
			if err != nil || !a.Result().Allowed || c[i] != 70 {
				t.Fatalf("%s: 70 of 100: %+v, %v, took %d", what, a, err, c[i])
			}
			c = costs(70)
			b, err := lim.ReserveUpTo(ctx, "k", limits, c, bit)
			if err != nil || !b.Result().Allowed || c[i] != 30 {
				t.Fatalf("%s: up to 70 with 30 left: %+v, %v, took %d; want the last 30", what, b.Result(), err, c[i])
			}
			if left := allowN(t, lim, "k", limits[i], 0).Remaining; left != 0 {
				t.Fatalf("%s: %d left after the last 30 were taken", what, left)
			}
			c = costs(70)
			denied, err := lim.ReserveUpTo(ctx, "k", limits, c, bit)
			if err != nil || denied.Result().Allowed || denied.Result().RetryAfter <= 0 {
				t.Fatalf("%s: up to 70 with none left: %+v, %v; want denied, with a wait", what, denied.Result(), err)
			}
			if withRequests {
				if left := allowN(t, lim, "k", limits[0], 0).Remaining; left != 8 {
					t.Fatalf("%s: %d requests left; want 8: the denied one is charged none", what, left)
				}
			}
			// The one that took 30 used 45: charged 15 more, a debt.
			settle := costs(45)
			if err := b.SettleEach(ctx, settle); err != nil {
				t.Fatal(err)
			}
			if alg == "gcra" || alg == "token_bucket" {
				res := allowN(t, lim, "k", limits[i], 0)
				// 15 tokens of debt at 100 an hour: 9m to wait out, 9m36s until one fits.
				if res.Remaining != 0 || res.RetryAfter != 15*36*time.Second || res.NextAfter != 16*36*time.Second {
					t.Fatalf("%s: after a debt of 15: %+v; want 0 left, a debt of 9m, one more in 9m36s", what, res)
				}
			}
			// The one that took 70 used 10: 60 back.
			if err := a.SettleEach(ctx, costs(10)); err != nil {
				t.Fatal(err)
			}
			if left, want := allowN(t, lim, "k", limits[i], 0).Remaining, 45; left != want {
				t.Fatalf("%s: %d left after 10 and 45 of 100 were used; want %d", what, left, want)
			}
		}
	}
}

// TestTakeRestZero: a limit that takes up to 0 takes nothing: the
// decision is a look, and the state is as it was (it took 1 before,
// found through envoyrls). Every algorithm, on miniredis.
func TestTakeRestZero(t *testing.T) {
	t.Parallel()
	lim, _, _ := miniLimiter(t)
	ctx := context.Background()
	for _, a := range suiteAlgorithms {
		key := "k-" + a.name
		q := core.Request{Key: key, Limits: []core.Limit{a.limit}, Costs: []int{0}, TakeRest: []bool{true}}
		dec, err := lim.Decide(ctx, &q)
		if err != nil || !dec.Allowed || q.Costs[0] != 0 {
			t.Fatalf("%s: up to 0: %+v, %v, took %d; want allowed, 0 taken", a.name, dec.Result, err, q.Costs[0])
		}
		if left := allowN(t, lim, key, a.limit, 0).Remaining; left != a.limit.Capacity() {
			t.Fatalf("%s: %d left after taking up to 0, want all %d", a.name, left, a.limit.Capacity())
		}
	}
}
