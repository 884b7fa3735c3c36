package redlimit_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// A plan of 10 requests a second and 60 a month. While Redis is down the
// rate holds in process, and the monthly quota, sold to the customer,
// fails closed: nothing is given away.
func ExampleWithLimitFailure() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	defer rdb.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lim := core.New(rdb, core.WithLogger(quiet))

	monthly, _ := core.ParseLimit("60/month calendar")
	plan, err := redlimit.NewPolicy(lim, core.PerSecond(10), redlimit.WithAlso(monthly),
		redlimit.WithFailure(redlimit.FailLocal),
		redlimit.WithLimitFailure(func(l core.Limit) redlimit.Failure {
			if l.Period >= 24*time.Hour {
				return redlimit.FailClosed // a quota is never given away
			}
			return redlimit.FailLocal // a rate holds in process
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	serve := func() redlimit.Decision {
		r := httptest.NewRequest("GET", "/", nil)
		return redlimit.Serve(plan, httptest.NewRecorder(), r, func(http.ResponseWriter, *http.Request) int { return http.StatusOK })
	}
	fmt.Println(serve().Outcome)
	m.Close() // Redis goes away
	d := serve()
	fmt.Println(d.Outcome, d.Status)
	// Output:
	// allowed
	// error 503
}
