package core_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// BenchmarkWorstCall measures the slowest single script call a hostile
// caller can make of each algorithm, on a real redis-server: the largest
// limits and costs Validate and the engine accept (a sliding log of 10 000
// events filled at once and then trimmed, 10 000 slots taken and freed,
// 100 sub-buckets, 32 refunds in a meter's queue, 16 limits in one
// decision, a batch of heavy calls). It reports max-us: the longest call
// the server's SLOWLOG recorded (every call is logged), the time another
// client's command may wait behind it. docs/algorithms.md quotes it. Run
// with: go test -run x -bench WorstCall -benchtime 20x ./core
func BenchmarkWorstCall(b *testing.B) {
	srv := redistest.Standalone(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	worst := func(b *testing.B, run func(i int)) {
		b.Helper()
		mustOK(b, rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err())
		mustOK(b, rdb.ConfigSet(ctx, "slowlog-max-len", "100000").Err())
		mustOK(b, rdb.SlowLogReset(ctx).Err())
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			run(i)
		}
		b.StopTimer()
		logs, err := rdb.SlowLogGet(ctx, -1).Result()
		mustOK(b, err)
		longest := time.Duration(0)
		for _, l := range logs {
			if name := fmt.Sprint(l.Args[0]); (name == "evalsha" || name == "eval") && l.Duration > longest {
				longest = l.Duration
			}
		}
		b.ReportMetric(float64(longest.Microseconds()), "max-us")
	}
	lim := core.New(rdb, core.WithTimeout(10*time.Second), core.WithDenyCache(0))
	key := func(i int) string { return "hostile:" + strconv.Itoa(i) }

	b.Run("sliding_log_10000", func(b *testing.B) {
		l := core.Limit{Algorithm: core.SlidingLog, Rate: core.MaxSlots, Period: time.Second}
		worst(b, func(i int) {
			r, err := lim.Reserve(ctx, key(i), []core.Limit{l}, core.MaxSlots) // 10 000 entries at once
			mustOK(b, err)
			mustOK(b, r.Settle(ctx, 2*core.MaxSlots)) // and as many more, a debt
			time.Sleep(1100 * time.Millisecond)       // all leave the window: the next call trims 20 000
			_, err = lim.AllowN(ctx, key(i), l, core.MaxSlots)
			mustOK(b, err)
		})
	})
	b.Run("concurrency_10000", func(b *testing.B) {
		l := core.Limit{Algorithm: core.Concurrency, Rate: core.MaxSlots, Period: time.Minute}
		worst(b, func(i int) {
			r, err := lim.Reserve(ctx, key(i), []core.Limit{l}, core.MaxSlots)
			mustOK(b, err)
			mustOK(b, r.Release(ctx))
		})
	})
	b.Run("sliding_window_100_buckets", func(b *testing.B) {
		l := core.Limit{Algorithm: core.SlidingWindow, Rate: 1_000_000, Period: 100 * time.Millisecond, Buckets: 100}
		worst(b, func(i int) {
			for j := 0; j < 101; j++ { // a sub-bucket each
				_, err := lim.AllowN(ctx, key(i), l, 1)
				mustOK(b, err)
				time.Sleep(time.Millisecond)
			}
		})
	})
	b.Run("gcra_32_refunds", func(b *testing.B) {
		l := core.Limit{Rate: 100, Period: time.Hour}
		worst(b, func(i int) {
			rs := make([]*core.Reservation, 40)
			for j := range rs {
				r, err := lim.Reserve(ctx, key(i), []core.Limit{l}, 2)
				mustOK(b, err)
				rs[j] = r
			}
			for j := len(rs) - 1; j >= 0; j-- { // each refund is recorded: up to 32 in the queue
				mustOK(b, rs[j].Settle(ctx, 1))
			}
		})
	})
	b.Run("16_limits", func(b *testing.B) {
		var limits []core.Limit
		for j := 1; j <= 16; j++ {
			limits = append(limits, core.Limit{Algorithm: []core.Algorithm{core.GCRA, core.TokenBucket, core.FixedWindow, core.SlidingWindow}[j%4],
				Rate: 1000, Period: time.Duration(j) * time.Second})
		}
		worst(b, func(i int) {
			_, err := lim.AllowAll(ctx, key(i), limits, 1)
			mustOK(b, err)
		})
	})
	b.Run("batch_of_heavy_logs", func(b *testing.B) {
		// 64 decisions of 1 000 log entries each, at once: the engine
		// sends at most 10 000 entries' worth in one batch script call.
		l := core.Limit{Algorithm: core.SlidingLog, Rate: 1000, Period: time.Hour}
		worst(b, func(i int) {
			var wg sync.WaitGroup
			for j := 0; j < 64; j++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := lim.AllowN(ctx, key(i)+":"+strconv.Itoa(j), l, 1000)
					if err != nil {
						b.Error(err)
					}
				}()
			}
			wg.Wait()
		})
	})
}

func mustOK(b *testing.B, err error) {
	b.Helper()
	if err != nil && err != redis.Nil {
		b.Fatal(err)
	}
}
