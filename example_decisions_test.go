package redlimit_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttp"
)

// A handler reads the Decision of every policy that decided its request,
// here to tell the client that a decision was made in process while
// Redis failed.
func ExampleDecisionsFrom() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	defer rdb.Close()
	lim := core.New(rdb, core.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))

	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, d := range redlimit.DecisionsFrom(r.Context()) {
			if d.Outcome == redlimit.OutcomeLocal {
				w.Header().Set("X-Limited-Locally", d.Policy) // Redis is failing
			}
			fmt.Println(d.Policy, d.Outcome, d.Result.Remaining)
		}
	})
	global := nethttp.New(lim, core.PerMinute(100), redlimit.WithName("global"), redlimit.WithFailure(redlimit.FailLocal))
	perRoute := nethttp.New(lim, core.PerMinute(10), redlimit.WithName("search"))
	app := global(perRoute(api))

	app.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/search", nil))
	m.Close() // Redis goes away
	w := httptest.NewRecorder()
	app.ServeHTTP(w, httptest.NewRequest("GET", "/search", nil))
	fmt.Println(w.Header().Get("X-Limited-Locally"))
	// Output:
	// global allowed 99
	// search allowed 9
	// global local 99
	// search error 0
	// global
}
