package core_test

// Examples that docs/engine.md, docs/algorithms.md, docs/metrics.md and
// docs/migration.md quote.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// silentRedis listens like a Redis server that has hung: it accepts
// connections and never answers. It returns its address and a function
// that closes it and every connection it accepted.
func silentRedis() (addr string, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String(), func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}
}

// A decision returns by the Limiter's timeout or its context's end,
// whichever comes first, however long Redis takes.
func ExampleWithTimeout() {
	addr, stop := silentRedis() // a Redis that has hung
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()

	lim := core.New(rdb, core.WithTimeout(50*time.Millisecond))
	_, err := lim.Allow(context.Background(), "user:42", core.PerMinute(100))
	fmt.Println(errors.Is(err, core.ErrTimeout), errors.Is(err, context.DeadlineExceeded))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err = lim.Allow(ctx, "user:42", core.PerMinute(100)) // the context ends first
	fmt.Println(errors.Is(err, core.ErrTimeout), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// true true
	// false true
}

// Once decisions have kept failing, the breaker answers them at once.
func ExampleWithBreaker() {
	addr, stop := silentRedis() // a Redis that has hung
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()

	lim := core.New(rdb, core.WithTimeout(20*time.Millisecond), core.WithBreaker(100*time.Millisecond),
		core.WithLogger(slog.New(slog.DiscardHandler))) // it logs the opening and the closing
	var err error
	for i := 0; i < 100 && !errors.Is(err, core.ErrUnavailable); i++ {
		_, err = lim.Allow(context.Background(), "user:42", core.PerMinute(100))
	}
	fmt.Println("fails at once:", errors.Is(err, core.ErrUnavailable))
	stats := lim.Stats()
	fmt.Println("open:", stats.BreakerOpen, "opened:", stats.BreakerOpens)
	// Output:
	// fails at once: true
	// open: true opened: 1
}

// Behind a proxy that sends a script to the shard of its first key
// (twemproxy, Envoy's Redis proxy), every decision must be a script call
// of its own.
func ExampleWithBatchScript() {
	rdb, stop := embeddedRedis()
	defer stop()

	lim := core.New(rdb, core.WithBatchScript(false))
	res, err := lim.Allow(context.Background(), "user:42", core.PerMinute(100))
	fmt.Println(res.Allowed, res.Remaining, err)
	// Output: true 99 <nil>
}

// With a client that bounds each command by its context's deadline, a
// Limiter with nothing in flight sends a decision from the caller's
// goroutine.
func ExampleNew_contextTimeoutEnabled() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()

	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim := core.New(rdb)
	res, err := lim.Allow(context.Background(), "user:42", core.PerMinute(100))
	fmt.Println(res.Allowed, res.Remaining, err)
	// Output: true 99 <nil>
}

// A key Redis has just denied is answered in process until the denial's
// RetryAfter, or for at most a second (WithDenyCacheMaxAge) before one
// decision asks Redis again.
func ExampleWithDenyCache() {
	rdb, stop := embeddedRedis()
	defer stop()
	now := t0 // a clock the example moves by hand; the cache counts down on it
	lim := core.New(rdb, core.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	limit := core.PerMinute(1)

	for i := 0; i < 3; i++ {
		res, _ := lim.Allow(ctx, "user:42", limit)
		fmt.Printf("allowed=%-5v cached=%-5v retry-after=%v\n", res.Allowed, res.Cached, res.RetryAfter)
		now = now.Add(500 * time.Millisecond)
	}
	if err := lim.Reset(ctx, "user:42", limit); err != nil { // seen at once through this Limiter
		fmt.Println(err)
	}
	res, _ := lim.Allow(ctx, "user:42", limit)
	fmt.Printf("allowed=%-5v cached=%-5v retry-after=%v\n", res.Allowed, res.Cached, res.RetryAfter)
	// Output:
	// allowed=true  cached=false retry-after=0s
	// allowed=false cached=false retry-after=59.5s
	// allowed=false cached=true  retry-after=59s
	// allowed=true  cached=false retry-after=0s
}

// A day is a period unit, "d", of 24 hours; String writes it for whole
// days.
func ExampleLimit_String() {
	for _, s := range []string{"5000/d", "20/2d", "100/24h", "100/36h", "10/1m30s", "3/500ms"} {
		l, err := core.ParseLimit(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%-9s period=%-8v String()=%q\n", s, l.Period, l.String())
	}
	// Output:
	// 5000/d    period=24h0m0s  String()="5000/d"
	// 20/2d     period=48h0m0s  String()="20/2d"
	// 100/24h   period=24h0m0s  String()="100/d"
	// 100/36h   period=36h0m0s  String()="100/36h"
	// 10/1m30s  period=1m30s    String()="10/90s"
	// 3/500ms   period=500ms    String()="3/500ms"
}

// Redis keys write a day's period in hours, as they did before "d" was a
// unit, so state written by a "5000/24h" limit is found by "5000/d".
func ExampleParseLimit_days() {
	rdb, stop := embeddedRedis()
	defer stop()
	lim := core.New(rdb)
	ctx := context.Background()

	daily, err := core.ParseLimit("5000/d")
	if err != nil {
		panic(err)
	}
	lim.Allow(ctx, "user:42", daily)
	keys, _ := rdb.Keys(ctx, "*").Result()
	fmt.Println(daily, keys)
	// Output: 5000/d [redlimit:{user:42}:gcra:24h]
}

// FormatLimits and ValidateLimits are gone: join the limits' Strings, and
// let ParseLimits check that they can be decided together.
func Example_formatLimits() {
	limits := []core.Limit{core.PerSecond(10), {Algorithm: core.FixedWindow, Rate: 1000, Period: time.Hour}}
	parts := make([]string, len(limits))
	for i, l := range limits {
		parts[i] = l.String()
	}
	s := strings.Join(parts, ", ")
	_, err := core.ParseLimits(s)
	fmt.Printf("%q %v\n", s, err)
	// Output: "10/s, 1000/h fixed_window" <nil>
}
