package nethttp_test

import (
	"fmt"
	"io"
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

func embeddedLimiter() (*core.Limiter, func()) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return core.New(rdb), func() { rdb.Close(); m.Close() }
}

func get(h http.Handler, method, path string) {
	r := httptest.NewRequest(method, path, nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println(method, path, w.Code, w.Header().Get("X-RateLimit-Remaining"))
}

func ExampleNew() {
	lim, stop := embeddedLimiter()
	defer stop()

	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	mux := http.NewServeMux()
	mux.Handle("GET /hello", nethttp.New(lim, core.PerMinute(2))(hello))

	for i := 0; i < 3; i++ {
		get(mux, "GET", "/hello")
	}
	// Output:
	// GET /hello 200 1
	// GET /hello 200 0
	// GET /hello 429 0
}

func Example_withAlso() {
	lim, stop := embeddedLimiter()
	defer stop()

	// 2 a minute for bursts, and 3 an hour as a quota, for the same key, in
	// one decision: a request either limit denies is charged to neither.
	hourly := core.Limit{Algorithm: core.FixedWindow, Rate: 3, Period: time.Hour}
	api := nethttp.New(lim, core.PerMinute(2), redlimit.WithName("api"), redlimit.WithAlso(hourly),
		redlimit.WithHeaders(redlimit.HeadersDraft))
	app := api(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for i := 0; i < 3; i++ {
		w := httptest.NewRecorder()
		app.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), "|", strings.Join(w.Header().Values("RateLimit"), ", "))
	}
	// t is the seconds until more quota is available; on the 429 the
	// hour's is left out, since it would be later than Retry-After (30).
	//
	// Output:
	// 200 "api";q=2;w=60 | "api";r=1;t=30, "api-1h";r=2;t=3600
	// 200 "api";q=2;w=60 | "api";r=0;t=30, "api-1h";r=1;t=3600
	// 429 "api";q=2;w=60 | "api";r=0;t=30, "api-1h";r=1
}

func ExampleRules_catchAll() {
	lim, stop := embeddedLimiter()
	defer stop()

	// "*" applies to every request, decided together with the rule that
	// matches: a login the route denies is not charged to "*" either.
	rules := redlimit.Rules{"*": "3/m", "POST /login": "1/m"}
	limits, err := nethttp.Rules(lim, rules)
	if err != nil {
		fmt.Println(err)
		return
	}
	app := limits(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	get(app, "POST", "/login")
	get(app, "POST", "/login")
	get(app, "POST", "/login")
	get(app, "GET", "/elsewhere") // "*" alone: 2 of its 3 left
	// Output:
	// POST /login 200 0
	// POST /login 429 0
	// POST /login 429 0
	// GET /elsewhere 200 1
}

func ExampleRules() {
	lim, stop := embeddedLimiter()
	defer stop()

	// Typically loaded from a configuration file with redlimit.ParseRules.
	rules := redlimit.Rules{"POST /login": "1/m", "GET /api/*": "100/s"}
	limits, err := nethttp.Rules(lim, rules, redlimit.WithKey(keyfunc.IP()))
	if err != nil {
		fmt.Println(err) // names the rule that is wrong
		return
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	app := limits(ok)
	get(app, "POST", "/login")
	get(app, "POST", "/login")
	get(app, "GET", "/api/users/7")
	get(app, "GET", "/elsewhere") // no rule: no limit
	// Output:
	// POST /login 200 0
	// POST /login 429 0
	// GET /api/users/7 200 99
	// GET /elsewhere 200
}
