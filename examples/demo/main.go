// Command demo sends the same bursts of requests through every redlimit
// algorithm and prints what each one allowed, with Remaining and
// Retry-After.
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
	"log"
	"os"
	"text/tabwriter"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// step is a moment of the scenario and how many requests arrive then.
type step struct {
	at       time.Duration
	requests int
}

// scenario: a burst that exceeds the limit, a trickle, then a burst just
// after the first second, where a fixed window has reset.
var scenario = []step{{0, 7}, {300 * time.Millisecond, 2}, {1000 * time.Millisecond, 6}}

var algorithms = []core.Algorithm{core.GCRA, core.TokenBucket, core.FixedWindow}

func main() {
	rdb, where, stop := connect()
	defer stop()

	const rate = 5
	start := time.Now()
	now := start
	lim := core.New(rdb,
		core.WithPrefix(fmt.Sprintf("redlimit-demo:%d:", start.UnixNano())),
		core.WithClock(func() time.Time { return now }))
	ctx := context.Background()

	fmt.Printf("redlimit demo: %d requests per second, bursts up to %d, on %s\n\n", rate, rate, where)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprint(w, "time\treq")
	for _, a := range algorithms {
		fmt.Fprintf(w, "\t%s", a)
	}
	fmt.Fprintln(w)

	allowed := make([]int, len(algorithms))
	for _, s := range scenario {
		now = start.Add(s.at)
		for r := 1; r <= s.requests; r++ {
			fmt.Fprintf(w, "%v\t%d", s.at, r)
			for i, a := range algorithms {
				res, err := lim.Allow(ctx, "client-1", core.Limit{Algorithm: a, Rate: rate, Period: time.Second})
				if err != nil {
					log.Fatalf("redis: %v", err)
				}
				if res.Allowed {
					allowed[i]++
					fmt.Fprintf(w, "\tok   remaining %d", res.Remaining)
				} else {
					fmt.Fprintf(w, "\t429  retry in %v", res.RetryAfter)
				}
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprint(w, "allowed\t")
	for _, n := range allowed {
		fmt.Fprintf(w, "\t%d", n)
	}
	fmt.Fprintln(w)
	w.Flush()
}

// connect uses REDIS_URL when set, else starts an embedded miniredis.
func connect() (rdb *redis.Client, where string, stop func()) {
	if url := os.Getenv("REDIS_URL"); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			log.Fatalf("REDIS_URL: %v", err)
		}
		rdb = redis.NewClient(opts)
		return rdb, "Redis at " + opts.Addr, func() { rdb.Close() }
	}
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	rdb = redis.NewClient(&redis.Options{Addr: m.Addr()})
	return rdb, "embedded miniredis (set REDIS_URL to use a real Redis)", func() {
		rdb.Close()
		m.Close()
	}
}
