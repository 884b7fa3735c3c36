package nethttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

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
