package redlimit_test

// Examples that docs/keys.md, docs/metrics.md and docs/migration.md quote.

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttp"
)

// docsRedis starts an in-process Redis whose clock stands still, so
// the examples print the same numbers every time. Use a real Redis in
// production.
func docsRedis() (*redis.Client, *miniredis.Miniredis) {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	m.SetTime(t0)
	return redis.NewClient(&redis.Options{Addr: m.Addr()}), m
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})

// sendFrom sends GET / from the client at remote to h and returns the answer.
func sendFrom(h http.Handler, remote string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Behind a load balancer, name the proxies to trust: forwarding headers
// count only from them, and X-Forwarded-For is read from the right.
func ExampleWithKey() {
	rdb, m := docsRedis()
	defer m.Close()
	lim := core.New(rdb)
	printKey := redlimit.WithObserver(func(_ *http.Request, d redlimit.Decision) {
		fmt.Println(d.Key, d.Result.Remaining)
	})

	// Behind a load balancer in 10.0.0.0/8 that appends to X-Forwarded-For.
	limited := nethttp.New(lim, core.PerMinute(100),
		redlimit.WithKey(keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"))), printKey)
	app := limited(okHandler)
	for _, xff := range []string{"198.51.100.1", "6.6.6.6, 198.51.100.1", "198.51.100.2"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.5:40000" // the load balancer
		r.Header.Set("X-Forwarded-For", xff)
		app.ServeHTTP(httptest.NewRecorder(), r)
	}
	// Output:
	// ip:198.51.100.1 99
	// ip:198.51.100.1 98
	// ip:198.51.100.2 99
}

// A request without a key is answered 400, never let through unlimited.
func ExampleWithKey_noKey() {
	rdb, m := docsRedis()
	defer m.Close()
	lim := core.New(rdb)

	app := nethttp.New(lim, core.PerMinute(100), redlimit.WithKey(keyfunc.Header("X-Api-Key")))(okHandler)
	w := sendFrom(app, "192.0.2.1:1234") // no X-Api-Key
	fmt.Print(w.Code, " ", w.Body.String())
	// Output: 400 {"error":"request has no rate limit key"}
}

// Keys longer than 128 bytes are stored as their SHA-256.
func ExampleWithKey_longKey() {
	rdb, m := docsRedis()
	defer m.Close()
	lim := core.New(rdb)
	printKey := redlimit.WithObserver(func(_ *http.Request, d redlimit.Decision) {
		fmt.Println(len(d.Key), d.Key[:len("sha256:")])
	})

	app := nethttp.New(lim, core.PerMinute(100), redlimit.WithKey(keyfunc.Header("X-Api-Key")), printKey)(okHandler)
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Api-Key", strings.Repeat("k", 1000))
	app.ServeHTTP(httptest.NewRecorder(), r)
	// Output: 71 sha256:
}

// An observer sees every decision: its Outcome, and the Redis error, if
// any. The Limiter's logger logs Redis errors too, at most once a second
// per policy.
func ExampleWithObserver() {
	rdb, m := docsRedis()
	lim := core.New(rdb, core.WithLogger(slog.New(slog.DiscardHandler)))
	observe := redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) {
		if d.Err != nil {
			fmt.Println(d.Policy, d.Outcome, "status", d.Status, "(Redis failed)")
			return
		}
		fmt.Println(d.Policy, d.Outcome, "status", d.Status)
	})

	open := nethttp.New(lim, core.PerMinute(1), redlimit.WithName("open"), observe)(okHandler)
	closed := nethttp.New(lim, core.PerMinute(1), redlimit.WithName("closed"), observe,
		redlimit.WithFailure(redlimit.FailClosed))(okHandler)
	sendFrom(open, "192.0.2.1:1234")
	sendFrom(open, "192.0.2.1:1234")
	m.Close() // Redis goes away
	fmt.Println(sendFrom(open, "192.0.2.2:1234").Code)
	fmt.Println(sendFrom(closed, "192.0.2.2:1234").Code)
	// Output:
	// open allowed status 0
	// open denied status 429
	// open error status 0 (Redis failed)
	// 200
	// closed error status 503 (Redis failed)
	// 503
}

// A Policy is checked once, at start-up; every adapter serves it.
func ExampleNewPolicy() {
	rdb, m := docsRedis()
	defer m.Close()
	lim := core.New(rdb)

	if _, err := redlimit.NewPolicy(lim, core.PerMinute(0)); err != nil {
		fmt.Println(err)
	}
	p, err := redlimit.NewPolicy(lim, core.PerMinute(2), redlimit.WithName("api"))
	if err != nil {
		panic(err)
	}
	app := nethttp.Middleware(p)(okHandler) // or ginlimit.Middleware(p), echolimit.Middleware(p)
	for i := 0; i < 3; i++ {
		fmt.Println(sendFrom(app, "192.0.2.1:1234").Code)
	}
	// Output:
	// redlimit: invalid limit: rate 0 must be positive
	// 200
	// 200
	// 429
}

// Serve runs one request through a Policy, as the adapters do: next
// serves it only if it may proceed.
func ExampleServe() {
	rdb, m := docsRedis()
	defer m.Close()
	lim := core.New(rdb)
	p, err := redlimit.NewPolicy(lim, core.PerMinute(1))
	if err != nil {
		panic(err)
	}

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := redlimit.Serve(p, w, r, func(w http.ResponseWriter, r *http.Request) int {
			fmt.Fprintln(w, "hello")
			return http.StatusOK // the status next answered with; 0 if unknown
		})
		fmt.Println(d.Outcome, d.Allowed())
	})
	sendFrom(handler, "192.0.2.1:1234")
	sendFrom(handler, "192.0.2.1:1234")
	// Output:
	// allowed true
	// denied false
}

// A policy's state is its name's. Unnamed, a policy is named by its
// limits: the same router built twice shares its state. Named, it keeps
// its state when its limits change.
func ExampleWithName() {
	rdb, m := docsRedis()
	defer m.Close()
	lim := core.New(rdb)
	remaining := func(mw func(http.Handler) http.Handler) string {
		return sendFrom(mw(okHandler), "192.0.2.1:1234").Header().Get("X-RateLimit-Remaining")
	}

	fmt.Println(remaining(nethttp.New(lim, core.PerMinute(5))), remaining(nethttp.New(lim, core.PerMinute(5))))
	fmt.Println(remaining(nethttp.New(lim, core.PerMinute(5), redlimit.WithName("login"))),
		remaining(nethttp.New(lim, core.Limit{Rate: 5, Period: time.Minute, Burst: 10}, redlimit.WithName("login"))))
	// Output:
	// 4 3
	// 4 8
}

// A policy keeps its state for a key under
// "<prefix><name>:{<key>}:<algorithm>:<period>"; deleting that Redis key
// resets it.
func Example_resetPolicyState() {
	rdb, m := docsRedis()
	defer m.Close()
	lim := core.New(rdb)
	login := nethttp.New(lim, core.PerMinute(1), redlimit.WithName("login"))(okHandler)
	fmt.Println(sendFrom(login, "192.0.2.1:1234").Header().Get("X-RateLimit-Remaining"))

	ctx := context.Background()
	// The policy "login" on the default prefix, its Decision.Key, its limit:
	state := "redlimit:login:{ip:192.0.2.1}:gcra:1m"
	fmt.Println(rdb.Del(ctx, state).Val()) // 1: one key deleted
	w := sendFrom(login, "192.0.2.1:1234")
	fmt.Println(w.Code, w.Header().Get("X-RateLimit-Remaining"))
	// Output:
	// 0
	// 1
	// 200 0
}

// The timeout of a decision is its Limiter's. Policies that need another
// use a Limiter of their own; Limiters may share a client, and share
// state through it.
func Example_timeoutPerLimiter() {
	rdb, m := docsRedis()
	defer m.Close()
	fast := core.New(rdb)                                   // 100 ms, the default
	patient := core.New(rdb, core.WithTimeout(time.Second)) // for a route that can wait

	api := nethttp.New(fast, core.PerSecond(100))(okHandler)
	export := nethttp.New(patient, core.PerHour(10))(okHandler)
	fmt.Println(sendFrom(api, "192.0.2.1:1234").Code, sendFrom(export, "192.0.2.1:1234").Code)
	// Output: 200 200
}
