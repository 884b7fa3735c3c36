package core_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// A Redis that loses its data (here a FLUSHALL; a restart without
// persistence or a failover to an empty replica alike) forgets a tenant's
// used-up month. The Limiter cannot bring the count back, but it says so:
// once in its log, at error level, and in Stats (and the metrics modules'
// redlimit_state_losses_total), for an alert.
func ExampleWithLossCheck() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	errorsOnly := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelError,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key != slog.MessageKey && a.Key != "marker" {
				return slog.Attr{} // the time and the server's port change from run to run
			}
			return a
		}}))
	// A check every 10 ms (1 s by default), each bounded by the timeout
	lim := core.New(rdb, core.WithLossCheck(10*time.Millisecond), core.WithTimeout(time.Second), core.WithLogger(errorsOnly))
	ctx := context.Background()

	monthly, err := core.ParseLimit("60/month calendar")
	if err != nil {
		panic(err)
	}
	res, _ := lim.AllowN(ctx, "tenant:7", monthly, 60)
	fmt.Println("used:", res.Allowed, res.Remaining, "left")
	for i := 0; i < 5000 && !m.Exists("redlimit:{generation}"); i++ { // the first check places the marker and reads it
		lim.AllowN(ctx, "tenant:7", monthly, 0)
		time.Sleep(time.Millisecond)
	}

	m.FlushAll()
	for i := 0; i < 5000 && lim.Stats().StateLosses == 0; i++ { // decisions flow; a check sees the loss
		lim.AllowN(ctx, "tenant:7", monthly, 0)
		time.Sleep(time.Millisecond)
	}
	res, _ = lim.AllowN(ctx, "tenant:7", monthly, 0)
	fmt.Println("after the loss:", res.Remaining, "left; losses seen:", lim.Stats().StateLosses)
	// Output:
	// used: true 0 left
	// msg="redlimit: a Redis server lost the limits' state: what it had counted is admitted again, and cannot be restored (docs/faults.md)" marker=redlimit:{generation}
	// after the loss: 60 left; losses seen: 1
}
