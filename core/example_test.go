package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// embeddedRedis starts an in-process Redis whose clock stands still at t0,
// so the examples print the same numbers every time. Use a real Redis in
// production.
func embeddedRedis() (*redis.Client, func()) {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	m.SetTime(t0)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return rdb, func() { rdb.Close(); m.Close() }
}

func ExampleLimiter_Allow() {
	rdb, stop := embeddedRedis()
	defer stop()
	lim := core.New(rdb)

	limit := core.PerMinute(3)
	for i := 0; i < 4; i++ {
		res, err := lim.Allow(context.Background(), "user:42", limit)
		if err != nil {
			fmt.Println("redis error:", err) // decide: fail open or closed
			return
		}
		fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", res.Allowed, res.Remaining, res.RetryAfter)
	}
	// Output:
	// allowed=true remaining=2 retry-after=0s
	// allowed=true remaining=1 retry-after=0s
	// allowed=true remaining=0 retry-after=0s
	// allowed=false remaining=0 retry-after=20s
}

func ExampleLimiter_AllowN() {
	rdb, stop := embeddedRedis()
	defer stop()
	lim := core.New(rdb)
	ctx := context.Background()

	// 10 tokens, refilled at 1 per second. A batch of 4 costs 4 tokens.
	limit := core.Limit{Algorithm: core.TokenBucket, Rate: 1, Period: time.Second, Burst: 10}
	for _, n := range []int{4, 4, 4, 0, 11} {
		res, _ := lim.AllowN(ctx, "import-job", limit, n)
		fmt.Printf("n=%-2d allowed=%-5v remaining=%d retry-after=%v\n", n, res.Allowed, res.Remaining, res.RetryAfter)
	}
	// Output:
	// n=4  allowed=true  remaining=6 retry-after=0s
	// n=4  allowed=true  remaining=2 retry-after=0s
	// n=4  allowed=false remaining=2 retry-after=2s
	// n=0  allowed=true  remaining=2 retry-after=0s
	// n=11 allowed=false remaining=2 retry-after=2562047h47m16.854775807s
}

func ExampleLimiter_AllowAll() {
	rdb, stop := embeddedRedis()
	defer stop()
	now := t0 // a clock the example moves a second per request
	lim := core.New(rdb, core.WithClock(func() time.Time { return now }))

	// Bursts of up to 3 a second, and at most 5 a day: one decision, one
	// round trip. A request either limit denies is charged to neither.
	limits, err := core.ParseLimits("3/s, 5/d fixed_window")
	if err != nil {
		panic(err)
	}
	for i := 0; i < 4; i++ {
		res, _ := lim.AllowAll(context.Background(), "user:42", limits, 2)
		fmt.Printf("allowed=%-5v binding=%-16v remaining=%d retry-after=%v\n", res.Allowed, res.Limit, res.Remaining, res.RetryAfter)
		now = now.Add(time.Second)
	}
	// Output:
	// allowed=true  binding=3/s              remaining=1 retry-after=0s
	// allowed=true  binding=3/s              remaining=1 retry-after=0s
	// allowed=false binding=5/d fixed_window remaining=1 retry-after=23h59m58s
	// allowed=false binding=5/d fixed_window remaining=1 retry-after=23h59m57s
}

func ExampleParseLimits() {
	limits, err := core.ParseLimits("10/s, 1000/h fixed_window")
	fmt.Println(limits, err)
	_, err = core.ParseLimits("10/s, 20/s") // one state for both: which would count?
	fmt.Println(err)
	// Output:
	// [10/s 1000/h fixed_window] <nil>
	// "10/s, 20/s": redlimit: invalid limit: 10/s and 20/s on one key would share state; give them different periods, algorithms or units (or scopes)
}

func ExampleParseLimit() {
	for _, s := range []string{"100/m", "5/10s", "20/s token_bucket burst=40", "0/s", "5/10"} {
		l, err := core.ParseLimit(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%-28q rate=%d period=%v burst=%d algorithm=%q\n", l.String(), l.Rate, l.Period, l.Burst, l.Algorithm)
	}
	// Output:
	// "100/m"                      rate=100 period=1m0s burst=0 algorithm=""
	// "5/10s"                      rate=5 period=10s burst=0 algorithm=""
	// "20/s token_bucket burst=40" rate=20 period=1s burst=40 algorithm="token_bucket"
	// redlimit: invalid limit: "0/s": rate 0 must be positive
	// redlimit: invalid limit: "5/10": period "10" is not a duration with a unit (us, ms, s, m, h, d, w)
}

func ExampleWithClock() {
	rdb, stop := embeddedRedis()
	defer stop()

	// The caller's clock instead of Redis TIME: handy in tests.
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	lim := core.New(rdb, core.WithClock(func() time.Time { return now }))
	limit := core.Limit{Algorithm: core.FixedWindow, Rate: 2, Period: time.Minute}
	ctx := context.Background()

	lim.AllowN(ctx, "k", limit, 2)
	res, _ := lim.Allow(ctx, "k", limit)
	fmt.Println(res.Allowed, res.RetryAfter)

	now = now.Add(res.RetryAfter) // the window ends
	res, _ = lim.Allow(ctx, "k", limit)
	fmt.Println(res.Allowed, res.Remaining)
	// Output:
	// false 1m0s
	// true 1
}

func ExampleLimiter_Reset() {
	rdb, stop := embeddedRedis()
	defer stop()
	lim := core.New(rdb)
	ctx := context.Background()
	limit := core.PerHour(1)

	lim.Allow(ctx, "password-reset:alice", limit)
	// Support unblocks Alice by hand:
	if err := lim.Reset(ctx, "password-reset:alice", limit); err != nil {
		fmt.Println(err)
	}
	res, _ := lim.Allow(ctx, "password-reset:alice", limit)
	fmt.Println(res.Allowed)
	// Output: true
}

// A shaping leaky bucket queues requests instead of rejecting them at
// once: Delay is each request's wait before it is served.
func ExampleLimit_shaping() {
	rdb, stop := embeddedRedis()
	defer stop()
	// A clock that stands still, for the printout: the deny cache counts
	// down on it.
	lim := core.New(rdb, core.WithClock(func() time.Time { return t0 }))

	// Serve 2 per second; queue up to 5; never make anyone wait over 1.5s.
	limit, _ := core.ParseLimit("2/s leaky_bucket burst=5 shape max_delay=1500ms")
	for i := 0; i < 6; i++ {
		res, _ := lim.Allow(context.Background(), "sms-gateway", limit)
		if res.Allowed {
			fmt.Printf("request %d: serve after %v\n", i, res.Delay)
			// time.Sleep(res.Delay), or a timer that respects the context
		} else {
			fmt.Printf("request %d: rejected, retry after %v\n", i, res.RetryAfter)
		}
	}
	// Output:
	// request 0: serve after 0s
	// request 1: serve after 500ms
	// request 2: serve after 1s
	// request 3: serve after 1.5s
	// request 4: rejected, retry after 500ms
	// request 5: rejected, retry after 500ms
}

// A sliding window smooths the fixed window's edges with a few counters.
func ExampleLimit_slidingWindow() {
	rdb, stop := embeddedRedis()
	defer stop()
	lim := core.New(rdb)

	limit := core.Limit{Algorithm: core.SlidingWindow, Rate: 100, Period: time.Minute, Buckets: 6}
	res, _ := lim.AllowN(context.Background(), "report-export", limit, 40)
	fmt.Println(limit, res.Allowed, res.Remaining)
	// Output: 100/m sliding_window buckets=6 true 60
}

// Per-instance limits protect each app instance on its own, next to a
// limit shared by all of them: a Limiter whose prefix names the instance.
func ExampleWithPrefix() {
	rdb, stop := embeddedRedis()
	defer stop()
	ctx := context.Background()
	shared := core.New(rdb)
	perPod := core.New(rdb, core.WithPrefix("redlimit:pod-7:")) // e.g. "redlimit:" + os.Getenv("HOSTNAME") + ":"

	global, _ := shared.Allow(ctx, "search", core.PerSecond(1000))
	local, _ := perPod.Allow(ctx, "search", core.PerSecond(50))
	fmt.Println(global.Remaining, local.Remaining)
	// Output: 999 49
}
