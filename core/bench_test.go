package core_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// BenchmarkAllow measures one decision per algorithm on a real redis-server,
// from parallel goroutines over 1000 keys. Besides time and allocations per
// op it reports server-us/op: the server's own time per EVALSHA, read from
// INFO commandstats after CONFIG RESETSTAT; and key-bytes: MEMORY USAGE of
// one key after a period of traffic at the full rate.
func BenchmarkAllow(b *testing.B) {
	rdb := redistest.Standalone(b).Client(b)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	ctx := context.Background()
	for _, a := range suiteAlgorithms {
		l := a.limit
		l.Rate, l.Period, l.Burst = 100, time.Second, 0
		b.Run(a.name, func(b *testing.B) {
			lim := core.New(rdb)
			if _, err := lim.Allow(ctx, keys[0], l); err != nil { // loads the script
				b.Fatal(err)
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := lim.Allow(ctx, keys[i%len(keys)], l); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
			b.StopTimer()
			b.ReportMetric(serverMicrosPerCall(b, rdb, "evalsha"), "server-us/op")
			b.ReportMetric(keyBytes(b, rdb, l), "key-bytes")
		})
	}
}

// BenchmarkScript measures each algorithm's script alone on a real
// redis-server: one client sends the decisions in pipelines of 100 over
// 1000 keys, so the server is the bottleneck and its time per call, from
// INFO commandstats, is not inflated by the client's work on the same
// cores. server-us/op is the figure the README's algorithm table quotes.
func BenchmarkScript(b *testing.B) {
	rdb := redistest.Standalone(b).Client(b)
	ctx := context.Background()
	for _, a := range suiteAlgorithms {
		l := a.limit
		l.Rate, l.Period, l.Burst = 100, time.Second, 0
		src, sha, argv := core.Script(l)
		b.Run(a.name, func(b *testing.B) {
			if err := rdb.ScriptLoad(ctx, src).Err(); err != nil {
				b.Fatal(err)
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			prefix := uniquePrefix()
			b.ResetTimer()
			for i := 0; i < b.N; i += 100 {
				pipe := rdb.Pipeline()
				for j := i; j < min(i+100, b.N); j++ {
					pipe.EvalSha(ctx, sha, []string{fmt.Sprintf("%s{k%d}:x", prefix, j%1000)}, argv...)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(serverMicrosPerCall(b, rdb, "evalsha"), "server-us/op")
		})
	}
}

// keyBytes runs one period of traffic at l's full rate through a fresh key,
// evenly spaced on a simulated clock, and returns MEMORY USAGE of its state.
func keyBytes(b *testing.B, rdb *redis.Client, l core.Limit) float64 {
	ctx := context.Background()
	prefix := uniquePrefix()
	clock := &fakeClock{now: time.Now()}
	lim := core.New(rdb, core.WithPrefix(prefix), core.WithClock(clock.Now))
	for i := 0; i < l.Rate; i++ {
		if res, err := lim.Allow(ctx, "k", l); err != nil || !res.Allowed {
			b.Fatalf("event %d of a period at the full rate: %+v, %v", i, res, err)
		}
		clock.Advance(l.Period / time.Duration(l.Rate))
	}
	n, err := rdb.MemoryUsage(ctx, stateKey(prefix, "k", l), 0).Result()
	if err != nil {
		b.Fatal(err)
	}
	return float64(n)
}

// serverMicrosPerCall reads usec_per_call of one command from INFO
// commandstats.
func serverMicrosPerCall(b *testing.B, rdb *redis.Client, cmd string) float64 {
	stats, err := redistest.CommandStats(context.Background(), rdb)
	if err != nil {
		b.Fatal(err)
	}
	s, ok := stats[cmd]
	if !ok {
		b.Fatalf("no %s in INFO commandstats", cmd)
	}
	return s.UsecPerCall
}

// BenchmarkAllowAll: two limits of different algorithms decided together
// (one script, one round trip), beside one limit alone and the two decided
// one after the other. server-us/op is the server's script time per
// decision, scripts/op the script calls per decision.
func BenchmarkAllowAll(b *testing.B) {
	rdb := redistest.Standalone(b).Client(b)
	ctx := context.Background()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	second := core.Limit{Rate: 1_000_000, Period: time.Second}
	hour := core.Limit{Algorithm: core.FixedWindow, Rate: 1_000_000_000, Period: time.Hour}
	for _, c := range []struct {
		name   string
		decide func(lim *core.Limiter, key string) error
	}{
		{"one_limit", func(lim *core.Limiter, key string) error { _, err := lim.Allow(ctx, key, second); return err }},
		{"two_limits_AllowAll", func(lim *core.Limiter, key string) error {
			_, err := lim.AllowAll(ctx, key, []core.Limit{second, hour}, 1)
			return err
		}},
		{"two_limits_one_after_the_other", func(lim *core.Limiter, key string) error {
			if _, err := lim.Allow(ctx, key, second); err != nil {
				return err
			}
			_, err := lim.Allow(ctx, key, hour)
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) { benchScripts(b, rdb, keys, c.decide) })
	}
}

// benchScripts runs decide on b.N keys of keys from parallel goroutines,
// on a fresh Limiter of rdb, and reports the server's script time
// (server-us/op) and script calls (scripts/op) per run.
func benchScripts(b *testing.B, rdb *redis.Client, keys []string, decide func(lim *core.Limiter, key string) error) {
	ctx := context.Background()
	lim := core.New(rdb, core.WithPrefix(uniquePrefix()))
	for i := 0; i < 2; i++ { // loads the scripts
		if err := decide(lim, keys[0]); err != nil {
			b.Fatal(err)
		}
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if err := decide(lim, keys[i%len(keys)]); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	stats, err := redistest.CommandStats(ctx, rdb)
	if err != nil {
		b.Fatal(err)
	}
	calls := stats["evalsha"].Calls + stats["eval"].Calls
	b.ReportMetric((stats["evalsha"].Usec+stats["eval"].Usec)/float64(b.N), "server-us/op")
	b.ReportMetric(calls/float64(b.N), "scripts/op")
}

// BenchmarkReserveSettle: what a request's life costs. allow is one
// decision; reserve_release a Reservation settled at its own cost (no
// second round trip); reserve_refund one settled at 0 (a refund: a second
// round trip); concurrency a slot taken and freed. server-us/op is the
// server's script time per request (decision and settlement together),
// scripts/op the script calls per request.
func BenchmarkReserveSettle(b *testing.B) {
	rdb := redistest.Standalone(b).Client(b)
	ctx := context.Background()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	rate := []core.Limit{{Rate: 1_000_000, Period: time.Second}}
	slots := []core.Limit{{Algorithm: core.Concurrency, Rate: 1_000_000, Period: time.Minute}}
	for _, c := range []struct {
		name string
		run  func(lim *core.Limiter, key string) error
	}{
		{"allow", func(lim *core.Limiter, key string) error { _, err := lim.AllowAll(ctx, key, rate, 1); return err }},
		{"reserve_release", func(lim *core.Limiter, key string) error {
			r, err := lim.Reserve(ctx, key, rate, 1)
			if err != nil {
				return err
			}
			return r.Release(ctx)
		}},
		{"reserve_refund", func(lim *core.Limiter, key string) error {
			r, err := lim.Reserve(ctx, key, rate, 1)
			if err != nil {
				return err
			}
			return r.Settle(ctx, 0)
		}},
		{"concurrency", func(lim *core.Limiter, key string) error {
			r, err := lim.Reserve(ctx, key, slots, 1)
			if err != nil {
				return err
			}
			return r.Release(ctx)
		}},
	} {
		b.Run(c.name, func(b *testing.B) { benchScripts(b, rdb, keys, c.run) })
	}
}

// BenchmarkPrefetchHot: one key that never reaches its limit, decided
// from parallel goroutines with Prefetch 1000: almost every decision is
// answered in process.
func BenchmarkPrefetchHot(b *testing.B) {
	rdb := redistest.Standalone(b).Client(b)
	lim := core.New(rdb, core.WithPrefix(uniquePrefix()))
	l := core.Limit{Rate: 1_000_000_000, Period: time.Second, Prefetch: 1000}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if res, err := lim.Allow(ctx, "hot", l); err != nil || !res.Allowed {
				b.Error(res, err)
				return
			}
		}
	})
}

// BenchmarkPrefetchCold: 1000 keys decided in turn, each far below its
// limit, with Prefetch 100: a fixed fetch size takes 100 events a
// decision and gives them back unused (two scripts a decision); the
// adaptive one takes none for a key decided once in a while.
func BenchmarkPrefetchCold(b *testing.B) {
	rdb := redistest.Standalone(b).Client(b)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	l := core.Limit{Rate: 1000, Period: time.Second, Prefetch: 100}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		opts []core.Option
	}{{"adaptive", nil}, {"fixed", []core.Option{core.WithFixedPrefetch()}}} {
		b.Run(c.name, func(b *testing.B) {
			lim := core.New(rdb, append(c.opts, core.WithPrefix(uniquePrefix()))...)
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := lim.Allow(ctx, keys[i%len(keys)], l); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			time.Sleep(2 * prefetchIdleForBench) // the last give-backs
			stats, err := redistest.CommandStats(ctx, rdb)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric((stats["evalsha"].Calls+stats["eval"].Calls)/float64(b.N), "scripts/op")
		})
	}
}

// prefetchIdleForBench is core's prefetchIdle.
const prefetchIdleForBench = 10 * time.Millisecond
