package core_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redlimit/redlimit/core"
)

// A worker that calls a language model: each job reserves an estimate of
// 500 tokens from a tenant's budgets of 10 000 an hour and 2 000 a minute,
// before it runs; once the model has answered, Settle charges what it
// really used: less gives the rest back, more puts the tenant in debt.
func ExampleLimiter_Reserve() {
	rdb, stop := embeddedRedis()
	defer stop()
	lim := core.New(rdb)
	ctx := context.Background()

	limits, err := core.ParseLimits("10000/h token_bucket, 2000/m")
	if err != nil {
		panic(err)
	}
	for _, used := range []int{120, 2400} {
		r, err := lim.Reserve(ctx, "tenant:7", limits, 500)
		if err != nil {
			panic(err) // Redis is down: the caller decides whether to run the job
		}
		if !r.Result().Allowed {
			fmt.Println("over budget, retry after", r.Result().RetryAfter)
			continue
		}
		// ... run the job; the model reports that it used `used` tokens ...
		if err := r.Settle(ctx, used); err != nil {
			fmt.Println(err) // perhaps not settled: the estimate stands
		}
	}
	res, _ := lim.AllowAll(ctx, "tenant:7", limits[:1], 0) // a look without a charge
	fmt.Println("tokens left:", res.Remaining)
	// Output: tokens left: 7480
}

// Requests and tokens in one decision: an API key may make 60 requests and
// spend 40 000 tokens a minute. Each request reserves 1 request and an
// estimate of 1 000 tokens; a request either limit denies is charged to
// neither. Once the model has answered, SettleEach charges the tokens it
// really used and leaves the request limit as it is.
func ExampleLimiter_ReserveEach() {
	rdb, stop := embeddedRedis()
	defer stop()
	lim := core.New(rdb)
	ctx := context.Background()

	limits, err := core.ParseLimits("60/m, 40000/m unit=tokens")
	if err != nil {
		panic(err)
	}
	r, err := lim.ReserveEach(ctx, "key:k1", limits, []int{1, 1000})
	if err != nil {
		panic(err) // Redis is down: the failure policy decides
	}
	if !r.Result().Allowed {
		fmt.Println("429: the", r.Result().Limit, "limit, retry after", r.Result().RetryAfter)
		return
	}
	// ... call the model; it reports 230 tokens used ...
	if err := r.SettleEach(ctx, []int{1, 230}); err != nil {
		fmt.Println(err)
	}
	for _, l := range limits {
		res, _ := lim.AllowN(ctx, "key:k1", l, 0) // a look: no charge
		fmt.Println(l, "left:", res.Remaining)
	}
	// Output:
	// 60/m left: 59
	// 40000/m unit=tokens left: 39770
}

// Release frees a reservation's slots and lets its count stand: the usual
// end of a job under a Concurrency limit. A Reservation nobody settles
// keeps its slots until their lease ends.
func ExampleReservation_Release() {
	rdb, stop := embeddedRedis()
	defer stop()
	lim := core.New(rdb)
	ctx := context.Background()
	oneAtATime := []core.Limit{{Algorithm: core.Concurrency, Rate: 1, Period: time.Minute}}

	first, _ := lim.Reserve(ctx, "report:42", oneAtATime, 1)
	second, _ := lim.Reserve(ctx, "report:42", oneAtATime, 1)
	fmt.Println(first.Result().Allowed, second.Result().Allowed, second.Result().RetryAfter)

	first.Release(ctx)
	third, _ := lim.Reserve(ctx, "report:42", oneAtATime, 1)
	fmt.Println(third.Result().Allowed)
	third.Release(ctx)
	// Output:
	// true false 1s
	// true
}

// A quota that follows the calendar: 3 a day in Berlin, counted from local
// midnight (which is 23:00 UTC in winter), whenever the first request
// came.
func ExampleLimit_calendar() {
	rdb, stop := embeddedRedis()
	defer stop()
	now := time.Date(2026, 1, 15, 22, 30, 0, 0, time.UTC) // 23:30 in Berlin
	lim := core.New(rdb, core.WithClock(func() time.Time { return now }))
	ctx := context.Background()

	daily, err := core.ParseLimit("3/d calendar=Europe/Berlin")
	if err != nil {
		panic(err)
	}
	res, _ := lim.AllowN(ctx, "user:42", daily, 3)
	fmt.Println(daily, res.Remaining, "left, resets in", res.ResetAfter)

	now = now.Add(30 * time.Minute) // midnight in Berlin
	res, _ = lim.Allow(ctx, "user:42", daily)
	fmt.Println(res.Allowed, res.Remaining, "left, resets in", res.ResetAfter)
	// Output:
	// 3/d fixed_window calendar=Europe/Berlin 0 left, resets in 30m0s
	// true 2 left, resets in 24h0m0s
}

// A hot key with Prefetch: the Limiter takes allowance from Redis ahead of
// demand and answers from it in process (Result.Cached), asking for more
// each time it runs out, up to Prefetch at a time: here, a burst of 16 at
// one instant needs 5 round trips, then 1 per 9 decisions.
func ExampleLimit_prefetch() {
	rdb, stop := embeddedRedis()
	defer stop()
	lim := core.New(rdb, core.WithClock(func() time.Time { return t0 }))
	hot, err := core.ParseLimit("1000/s prefetch=8")
	if err != nil {
		panic(err)
	}
	var trips []string
	for i := 0; i < 16; i++ {
		res, _ := lim.Allow(context.Background(), "search", hot)
		if res.Cached {
			trips = append(trips, ".")
		} else {
			trips = append(trips, "R")
		}
	}
	fmt.Println(strings.Join(trips, ""))
	// Output: RR.R..R....R....
}
