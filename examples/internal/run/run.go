// Package run holds what the example programs share: a Redis to talk to
// (REDIS_URL, else an embedded miniredis, so every example runs with no
// setup), serving an example app, and the check their tests run.
package run

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// Redis returns a client of the server at REDIS_URL (redis://host:port/db)
// when it is set, else of an embedded miniredis; a description of where it
// points; and a function that closes both.
func Redis() (rdb *redis.Client, where string, stop func(), err error) {
	if url := os.Getenv("REDIS_URL"); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		rdb = redis.NewClient(opts)
		return rdb, "Redis at " + opts.Addr, func() { rdb.Close() }, nil
	}
	m, err := miniredis.Run()
	if err != nil {
		return nil, "", nil, err
	}
	rdb = redis.NewClient(&redis.Options{Addr: m.Addr()})
	return rdb, "embedded miniredis (set REDIS_URL to use a real Redis)", func() {
		rdb.Close()
		m.Close()
	}, nil
}

// Serve runs an example app on ADDR (default localhost:8080) until killed,
// after printing how to try it.
func Serve(framework string, newApp func(*core.Limiter) http.Handler) {
	rdb, where, stop, err := Redis()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = "localhost:8080"
	}
	fmt.Printf("%s example on http://%s, limits kept in %s\n", framework, addr, where)
	fmt.Printf("try:\n  curl -i http://%s/hello\n  for i in 1 2 3 4; do curl -i -X POST http://%s/login; done\n", addr, addr)
	log.Fatal(http.ListenAndServe(addr, newApp(core.New(rdb))))
}

// Check is the examples' test: /hello answers with rate-limit headers and
// is denied past 10 a second, and the fourth login attempt within a minute
// is refused with Retry-After.
func Check(t *testing.T, newApp func(*core.Limiter) http.Handler) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	app := newApp(core.New(rdb))
	send := func(method, path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		if method == http.MethodGet {
			r.RemoteAddr = "198.51.100.9:4000" // another client than the logins'
		}
		w := httptest.NewRecorder()
		app.ServeHTTP(w, r)
		return w
	}
	w := send(http.MethodGet, "/hello")
	// The binding limit of the two is the one with fewer left: 10/s.
	if w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Limit") != "10" || w.Header().Get("X-RateLimit-Remaining") != "9" {
		t.Fatalf("GET /hello: %d %v", w.Code, w.Header())
	}
	for i := 0; i < 9; i++ {
		send(http.MethodGet, "/hello")
	}
	// The second's ten are spent.
	if w := send(http.MethodGet, "/hello"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("11th GET /hello in a second: %d, want 429", w.Code)
	}
	for i := 1; i <= 3; i++ {
		if w := send(http.MethodPost, "/login"); w.Code != http.StatusOK {
			t.Fatalf("login %d: %d %s", i, w.Code, w.Body)
		}
	}
	w = send(http.MethodPost, "/login")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "60" {
		t.Fatalf("fourth login: %d %v, want 429 with Retry-After 60", w.Code, w.Header())
	}
}
