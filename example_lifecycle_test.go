package redlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttp"
)

// Only failed logins count: a login that succeeds is refunded after its
// handler returns, so 3 failures an hour lock an address out, and
// successes never do.
func ExampleWithResponseCost_failedLogins() {
	rdb, m := docsRedis()
	defer m.Close()
	defer rdb.Close()
	lim := core.New(rdb)

	onlyFailures := redlimit.WithResponseCost(func(r *http.Request, status int, h http.Header) int {
		if status < 400 {
			return 0 // a success costs nothing
		}
		return 1
	})
	limit := core.Limit{Algorithm: core.SlidingLog, Rate: 3, Period: time.Hour}
	login := nethttp.New(lim, limit, redlimit.WithName("login"), onlyFailures)(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			if r.FormValue("password") != "secret" {
				http.Error(w, "wrong password", http.StatusUnauthorized)
			}
		}))

	for _, password := range []string{"secret", "secret", "guess", "guess", "guess", "guess", "secret"} {
		w := httptest.NewRecorder()
		login.ServeHTTP(w, httptest.NewRequest("POST", "/login?password="+password, nil))
		fmt.Println(password, w.Code)
	}
	// Output:
	// secret 200
	// secret 200
	// guess 401
	// guess 401
	// guess 401
	// guess 429
	// secret 429
}

// An LLM-style endpoint: each request reserves an estimate of 100 tokens
// from a budget of 1000 an hour, and is charged what its handler reports
// in a header once it is done: less gives the rest back, more puts the
// key into debt.
func ExampleWithResponseCost_tokens() {
	rdb, m := docsRedis()
	defer m.Close()
	defer rdb.Close()
	lim := core.New(rdb)

	used := redlimit.WithResponseCost(func(r *http.Request, status int, h http.Header) int {
		n, err := strconv.Atoi(h.Get("X-Tokens-Used"))
		if err != nil {
			return 100 // no report: the estimate stands
		}
		return n
	})
	budget := core.Limit{Algorithm: core.TokenBucket, Rate: 1000, Period: time.Hour}
	complete := nethttp.New(lim, budget, redlimit.WithName("tokens"), redlimit.WithCost(100), used)(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Tokens-Used", r.FormValue("tokens")) // what the model consumed
		}))

	for _, tokens := range []string{"40", "700", "500", "1"} {
		w := httptest.NewRecorder()
		complete.ServeHTTP(w, httptest.NewRequest("POST", "/complete?tokens="+tokens, nil))
		fmt.Printf("used %-3s -> %d, %s left before it ran\n", tokens, w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// used 40  -> 200, 900 left before it ran
	// used 700 -> 200, 860 left before it ran
	// used 500 -> 200, 160 left before it ran
	// used 1   -> 429, 0 left before it ran
}

// 3 requests in flight per user: a slot is held from the decision until
// the handler returns, and freed then, or when its lease ends if the
// process dies first.
func Example_inFlight() {
	rdb, m := docsRedis()
	defer m.Close()
	defer rdb.Close()
	lim := core.New(rdb)

	inFlight := core.Limit{Algorithm: core.Concurrency, Rate: 3, Period: 30 * time.Second} // "3 concurrent lease=30s"
	var started sync.WaitGroup
	release := make(chan struct{})
	export := nethttp.New(lim, inFlight, redlimit.WithName("export"))(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			started.Done()
			<-release // a long export
		}))

	var done sync.WaitGroup
	for i := 0; i < 3; i++ {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			export.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/export", nil))
		}()
	}
	started.Wait()
	w := httptest.NewRecorder()
	export.ServeHTTP(w, httptest.NewRequest("POST", "/export", nil))
	fmt.Println("a fourth while three run:", w.Code)

	close(release)
	done.Wait()
	started.Add(1)
	w = httptest.NewRecorder()
	export.ServeHTTP(w, httptest.NewRequest("POST", "/export", nil))
	fmt.Println("once they are done:", w.Code)
	// Output:
	// a fourth while three run: 429
	// once they are done: 200
}
