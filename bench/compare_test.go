// Package bench compares redlimit with the limiters Go engineers use today,
// side by side in one run on one real redis-server. It is a module of its
// own so that users of redlimit never download the peers.
//
//	cd bench && go test -run X -bench . -benchmem
package bench_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/httprate"
	"github.com/go-redis/redis_rate/v10"
	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"
	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ulstdlib "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"golang.org/x/time/rate"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echolimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/nethttp"
)

// BenchmarkDecision: one decision from parallel goroutines over 1000 keys at
// 100 per second each (so nearly all are allowed), on the same server.
// Same algorithm, two implementations: GCRA (redlimit, go-redis/redis_rate)
// and fixed window (redlimit, ulule/limiter). Besides ns/op and allocs it
// reports the server's time per decision and the script calls per
// decision (1: one round trip).
func BenchmarkDecision(b *testing.B) {
	rdb := redistest.Standalone(b).Client(b)
	ctx := context.Background()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}

	lim := core.New(rdb)
	rr := redis_rate.NewLimiter(rdb)
	store, err := ulredis.NewStoreWithOptions(rdb, limiter.StoreOptions{Prefix: "ulule"})
	if err != nil {
		b.Fatal(err)
	}
	ul := limiter.New(store, limiter.Rate{Period: time.Second, Limit: 100})
	gcra := core.PerSecond(100)
	fixed := core.Limit{Algorithm: core.FixedWindow, Rate: 100, Period: time.Second}

	for _, c := range []struct {
		name  string
		allow func(key string) error
	}{
		{"gcra/redlimit", func(k string) error { _, err := lim.Allow(ctx, k, gcra); return err }},
		{"gcra/redis_rate", func(k string) error { _, err := rr.Allow(ctx, k, redis_rate.PerSecond(100)); return err }},
		{"fixed_window/redlimit", func(k string) error { _, err := lim.Allow(ctx, k, fixed); return err }},
		{"fixed_window/ulule", func(k string) error { _, err := ul.Get(ctx, k); return err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			if err := c.allow(keys[0]); err != nil { // loads scripts
				b.Fatal(err)
			}
			rdb.ConfigResetStat(ctx)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					if err := c.allow(keys[i%len(keys)]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			usec, calls := serverTotals(b, rdb)
			b.ReportMetric(usec/float64(b.N), "server-us/op")
			b.ReportMetric(calls/float64(b.N), "scripts/op")
		})
	}
}

// serverTotals sums usec and calls of the script commands (EVALSHA, EVAL).
// Every limiter here decides in one script call; commands a script runs
// inside are listed separately, but their time is already part of the
// script's, so they are not added.
func serverTotals(b *testing.B, rdb *redis.Client) (usec, calls float64) {
	stats, err := redistest.CommandStats(context.Background(), rdb)
	if err != nil {
		b.Fatal(err)
	}
	for _, cmd := range []string{"evalsha", "eval"} {
		usec += stats[cmd].Usec
		calls += stats[cmd].Calls
	}
	return usec, calls
}

// BenchmarkMiddleware: one request through a handler behind each
// middleware, one at a time; the limit never denies. redlimit and ulule
// decide on the same redis-server. httprate's and echo's own limiters keep
// their counts in process memory, so they are not distributed: they are here
// as the cost of not going to Redis at all, not as equals.
func BenchmarkMiddleware(b *testing.B) {
	rdb := redistest.Standalone(b).Client(b)
	lim := core.New(rdb)
	big := core.Limit{Rate: 1_000_000_000, Period: time.Second}
	store, err := ulredis.NewStoreWithOptions(rdb, limiter.StoreOptions{Prefix: "ulule-mw"})
	if err != nil {
		b.Fatal(err)
	}
	ul := ulstdlib.NewMiddleware(limiter.New(store, limiter.Rate{Period: time.Second, Limit: 1_000_000_000}))
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	byRemoteIP := func(r *http.Request) (string, error) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		return host, err
	}

	e := echo.New()
	// Two policies of one Limiter need names of their own, or they would
	// share state; this one is named, the net/http one below takes the
	// default.
	e.Use(echolimit.New(lim, big, redlimit.WithName("echo")))
	e.GET("/", echo.WrapHandler(ok))
	em := echo.New()
	em.Use(echomw.RateLimiter(echomw.NewRateLimiterMemoryStore(rate.Limit(1_000_000_000))))
	em.GET("/", echo.WrapHandler(ok))

	for _, c := range []struct {
		name string
		h    http.Handler
	}{
		{"nethttp/bare", ok},
		{"nethttp/redlimit", nethttp.New(lim, big)(ok)},
		{"nethttp/ulule", ul.Handler(ok)},
		{"nethttp/httprate-memory", httprate.LimitBy(1_000_000_000, time.Second, byRemoteIP)(ok)},
		{"echo/redlimit", e},
		{"echo/echo-memory", em},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = "203.0.113.7:40000"
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				w := httptest.NewRecorder()
				c.h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}
