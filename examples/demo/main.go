// Command demo sends the same bursts of requests through every redlimit
// algorithm and prints what each one admitted, with Remaining and
// Retry-After; then sends requests through the same limit in net/http, gin
// and echo and prints the status codes and headers a client sees.
//
//	go run ./examples/demo                           # embedded Redis (miniredis)
//	REDIS_URL=redis://localhost:6379/0 go run ./examples/demo
//
// The requests carry simulated timestamps (core.WithClock), so the table is
// the same on every run and on every Redis.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/labstack/echo/v4"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echolimit"
	"github.com/redlimit/redlimit/examples/internal/run"
	"github.com/redlimit/redlimit/ginlimit"
	"github.com/redlimit/redlimit/nethttp"
)

// step is a moment of the scenario and how many requests arrive then.
type step struct {
	at       time.Duration
	requests int
}

// scenario: a burst that exceeds the limit, a trickle, then a burst just
// after the first second, where a fixed window has reset.
var scenario = []step{{0, 7}, {300 * time.Millisecond, 2}, {1000 * time.Millisecond, 6}}

// limits: every algorithm and variant, all 5 per second.
var limits = []core.Limit{
	{Algorithm: core.GCRA, Rate: 5, Period: time.Second},
	{Algorithm: core.TokenBucket, Rate: 5, Period: time.Second},
	{Algorithm: core.TokenBucket, Rate: 5, Period: time.Second, Stepped: true},
	{Algorithm: core.LeakyBucket, Rate: 5, Period: time.Second},
	{Algorithm: core.LeakyBucket, Rate: 5, Period: time.Second, Shape: true},
	{Algorithm: core.FixedWindow, Rate: 5, Period: time.Second},
	{Algorithm: core.SlidingWindow, Rate: 5, Period: time.Second},
	{Algorithm: core.SlidingLog, Rate: 5, Period: time.Second},
}

// command is what -h says.
var command = run.Command{
	Path: "go run ./examples/demo",
	Doc: `Sends the same bursts of requests through every redlimit algorithm and
prints what each one admitted, then sends requests through one limit in
net/http, gin and echo and prints what a client sees.`,
	Env: []string{run.RedisURL},
}

func main() {
	command.Parse()
	demo()
}

// demo prints the tables.
func demo() {
	rdb, where, stop, err := run.Redis()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()

	// A whole second, so windows and sub-buckets start with the scenario
	// and the table is the same on every run.
	start := time.Now().Truncate(time.Second)
	now := start
	// A scripted run, not a server: it waits for a slow machine rather
	// than fail a decision at the default 100 ms.
	lim := core.New(rdb,
		core.WithPrefix(fmt.Sprintf("redlimit-demo:%d:", start.UnixNano())),
		core.WithClock(func() time.Time { return now }), core.WithTimeout(10*time.Second))
	ctx := context.Background()

	fmt.Printf("redlimit demo on %s\n", where)
	fmt.Printf("Every limit allows 5 requests per second. + admitted, - rejected (429);\n")
	fmt.Printf("after each group: Remaining, and Retry-After of the last rejection.\n\n")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprint(w, "limit")
	for _, s := range scenario {
		fmt.Fprintf(w, "\t%d at %v", s.requests, s.at)
	}
	fmt.Fprintln(w, "\tadmitted")

	for i, l := range limits {
		fmt.Fprint(w, l)
		admitted := 0
		for _, s := range scenario {
			now = start.Add(s.at)
			b := sendBurst(ctx, lim, fmt.Sprintf("client-%d", i), l, s.requests)
			admitted += b.admitted
			fmt.Fprintf(w, "\t%s", b)
		}
		fmt.Fprintf(w, "\t%d\n", admitted)
	}
	w.Flush()
	fmt.Println("\nThe shaping leaky bucket admits requests with a delay, their place in its queue:")
	fmt.Println("they are served 200ms apart.")

	frameworks(lim)
}

// burst is what the requests of one step got: a mark for each (+
// admitted, - rejected), how many were admitted, the last result, the last
// rejection and the last admission with a delay.
type burst struct {
	marks                 string
	admitted              int
	last, denied, delayed core.Result
}

// sendBurst sends n requests for key under l at once.
func sendBurst(ctx context.Context, lim *core.Limiter, key string, l core.Limit, n int) burst {
	var b burst
	var marks strings.Builder
	for r := 0; r < n; r++ {
		res, err := lim.Allow(ctx, key, l)
		if err != nil {
			log.Fatalf("redis: %v", err)
		}
		b.last = res
		if res.Allowed {
			b.admitted++
			marks.WriteByte('+')
			if res.Delay > 0 {
				b.delayed = res
			}
		} else {
			b.denied = res
			marks.WriteByte('-')
		}
	}
	b.marks = marks.String()
	return b
}

// String is the burst's cell in the table: its marks, the last Remaining,
// the last Retry-After and the longest queueing delay.
func (b burst) String() string {
	cell := fmt.Sprintf("%s rem %d", b.marks, b.last.Remaining)
	if b.denied.RetryAfter > 0 {
		cell += fmt.Sprintf(" retry %v", b.denied.RetryAfter)
	}
	if b.delayed.Delay > 0 {
		cell += fmt.Sprintf(" queued up to %v", b.delayed.Delay)
	}
	return cell
}

// frameworks sends the same requests through the same one-line limit in
// net/http, gin and echo, and prints what a client sees.
func frameworks(lim *core.Limiter) {
	limit := core.PerSecond(2)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })

	gin.SetMode(gin.ReleaseMode)
	g := gin.New()
	g.Use(ginlimit.New(lim, limit, redlimit.WithName("demo-gin")))
	g.GET("/hello", gin.WrapH(ok))

	e := echo.New()
	e.Use(echolimit.New(lim, limit, redlimit.WithName("demo-echo")))
	e.GET("/hello", echo.WrapHandler(ok))

	apps := []struct {
		name string
		app  http.Handler
	}{
		{"net/http", nethttp.New(lim, limit, redlimit.WithName("demo-nethttp"))(ok)},
		{"gin", g},
		{"echo", e},
	}
	fmt.Printf("\nThe HTTP middleware, %v per client address, 3 requests in a row:\n\n", limit)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "framework\treq\tstatus\tX-RateLimit-Limit\tRemaining\tReset\tRetry-After\tbody")
	for _, a := range apps {
		for i := 1; i <= 3; i++ {
			r := httptest.NewRequest(http.MethodGet, "/hello", nil)
			r.RemoteAddr = "203.0.113.7:40000"
			rec := httptest.NewRecorder()
			a.app.ServeHTTP(rec, r)
			h := rec.Header()
			fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", a.name, i, rec.Code, h.Get("X-RateLimit-Limit"),
				h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset"), h.Get("Retry-After"),
				strings.TrimSpace(rec.Body.String()))
		}
	}
	w.Flush()
}
