package roundtrip_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/roundtrip"
)

// embeddedLimiter returns a Limiter on an in-process Redis whose clock is
// the process's, as a real Redis's is, so waits take real time. Use a real
// Redis in production. Its decisions may take a second, not the default
// 100 ms, for the examples' sake on a busy test machine.
func embeddedLimiter() (*core.Limiter, func()) {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return core.New(rdb, core.WithTimeout(time.Second)), func() { rdb.Close(); m.Close() }
}

// An http.Client whose requests to a third-party API share one rate with
// every other process's.
func Example() {
	// A stand-in for the third-party API.
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "pong")
	}))
	defer api.Close()
	lim, stop := embeddedLimiter() // core.New(rdb) with your Redis client
	defer stop()

	// 10 requests a second to the API's host, one at a time, for every
	// process whose client is built like this one.
	client := &http.Client{
		Transport: roundtrip.New(lim, core.Limit{Rate: 10, Period: time.Second, Burst: 1}),
		Timeout:   10 * time.Second, // bounds the wait for a turn too
	}
	start := time.Now()
	for i := 1; i <= 3; i++ {
		resp, err := client.Get(api.URL + "/ping")
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("request %d: %s %s", i, resp.Status, body)
	}
	fmt.Println("at least 100 ms apart:", time.Since(start) >= 200*time.Millisecond)
	// Output:
	// request 1: 200 OK pong
	// request 2: 200 OK pong
	// request 3: 200 OK pong
	// at least 100 ms apart: true
}

// A worker that is no HTTP client shares the rate by waiting on the same
// key.
func ExampleWithKey() {
	var calls atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer api.Close()
	lim, stop := embeddedLimiter() // core.New(rdb) with your Redis client
	defer stop()
	limit := core.PerHour(1) // a tight quota, to show it shared

	client := &http.Client{Transport: roundtrip.New(lim, limit, roundtrip.WithKey("partner"))}
	if err := lim.Wait(context.Background(), "partner", limit); err != nil { // the worker
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api.URL, nil)
	_, err := client.Do(req) // the next turn is an hour away: fails at once
	fmt.Println("deadline exceeded:", errors.Is(err, context.DeadlineExceeded), "calls:", calls.Load())
	// Output: deadline exceeded: true calls: 0
}
