package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// A Limiter is made once per process, on the go-redis client the app
// already has. New does no I/O.
func Example_newLimiter() {
	m, err := miniredis.Run() // an embedded Redis, for the example
	if err != nil {
		panic(err)
	}
	defer m.Close()
	redisAddr := m.Addr()

	// ContextTimeoutEnabled: go-redis bounds each command by its context,
	// so a caller alone sends its own decision (docs/engine.md).
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true}) // or a ClusterClient, a FailoverClient
	lim := core.New(rdb)
	defer rdb.Close()

	res, err := lim.Allow(context.Background(), "user:42", core.PerMinute(100))
	fmt.Println(res.Allowed, res.Remaining, err)
	// Output: true 99 <nil>
}

// Limits are values, or strings in a small grammar.
func ExampleLimit() {
	a := core.PerSecond(20) // GCRA, bursts of up to 20
	b := core.Limit{Algorithm: core.TokenBucket, Rate: 10, Period: time.Second, Burst: 50}
	c, err := core.ParseLimit("20/s token_bucket burst=40") // also "100/m", "5/10s", "3/500ms", "5000/d"
	if err != nil {
		panic(err)
	}
	d, err := core.ParseLimit("1000/d fixed_window")
	if err != nil {
		panic(err)
	}
	several, err := core.ParseLimits("10/s, 5000/d fixed_window") // decided together
	fmt.Println(a, "|", b, "|", c, "|", d, "|", several, err)
	// Output: 20/s | 10/s token_bucket burst=50 | 20/s token_bucket burst=40 | 1000/d fixed_window | [10/s 5000/d fixed_window] <nil>
}
