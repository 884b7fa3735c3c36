package core_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// keysBackends runs f on each Redis a decision of several keys takes a
// different way on: miniredis and a standalone redis-server (one script),
// the same server behind WithBatchScript(false) and a 3-master Cluster
// (each key reserved on its own slot, refunded when another denies).
func keysBackends(t *testing.T, f func(t *testing.T, newLimiter func(opts ...core.Option) *core.Limiter)) {
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		m := miniredis.RunT(t)
		f(t, func(opts ...core.Option) *core.Limiter {
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			return core.New(c, append([]core.Option{patient}, opts...)...)
		})
	})
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		s := redistest.Standalone(t)
		f(t, func(opts ...core.Option) *core.Limiter {
			return core.New(s.Client(t), append([]core.Option{patient}, opts...)...)
		})
	})
	t.Run("standalone-apart", func(t *testing.T) {
		t.Parallel()
		s := redistest.Standalone(t)
		f(t, func(opts ...core.Option) *core.Limiter {
			return core.New(s.Client(t), append([]core.Option{patient, core.WithBatchScript(false)}, opts...)...)
		})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := redistest.NewCluster(t, 3)
		f(t, func(opts ...core.Option) *core.Limiter {
			return core.New(c.Client(t), append([]core.Option{patient}, opts...)...)
		})
	})
}

// keysLimit is a limit of alg for the model check: rate events an hour
// (lease for a Concurrency limit).
func keysLimit(alg core.Algorithm, rate int) core.Limit {
	return core.Limit{Algorithm: alg, Rate: rate, Period: time.Hour}
}

// TestDecideKeysModel: a request of two keys (an address and a user name,
// each with a limit of its own) is decided all or nothing, under
// concurrency, on one server and on a Cluster, where the keys are in
// different slots: the model counts what each key was charged by the
// requests admitted (and settled) and Redis must hold exactly that, never
// more than a limit allows: a request any key denied was charged to none.
// 4 Limiters on separate clients, 16 goroutines, random keys; the clock
// stands still, so every algorithm's remaining is its capacity less its
// charges.
func TestDecideKeysModel(t *testing.T) {
	t.Parallel()
	pairs := [][2]core.Algorithm{
		{core.GCRA, core.GCRA},
		{core.FixedWindow, core.SlidingLog},
		{core.TokenBucket, core.LeakyBucket},
		{core.SlidingWindow, core.GCRA},
		{core.Concurrency, core.Concurrency},
	}
	keysBackends(t, func(t *testing.T, newLimiter func(opts ...core.Option) *core.Limiter) {
		for _, pair := range pairs {
			t.Run(fmt.Sprintf("%s+%s", pair[0], pair[1]), func(t *testing.T) {
				testDecideKeysModel(t, newLimiter, keysLimit(pair[0], 12), keysLimit(pair[1], 5))
			})
		}
	})
}

// keysModel is what the model check knows: each key's charge and, for a
// Concurrency limit, its slots in flight.
type keysModel struct {
	mu               sync.Mutex
	charged          map[string]int
	inFlight         map[string]int
	admitted, denied int
}

func testDecideKeysModel(t *testing.T, newLimiter func(opts ...core.Option) *core.Limiter, ipLimit, userLimit core.Limit) {
	ctx := context.Background()
	now := time.Date(2031, 3, 1, 12, 0, 0, 0, time.UTC)
	prefix := uniquePrefix()
	var lims []*core.Limiter
	for i := range 4 { // two without a deny cache: every request reaches Redis, keys in order
		lims = append(lims, newLimiter(core.WithPrefix(prefix), core.WithClock(func() time.Time { return now }), core.WithDenyCache(i%2*core.DefaultDenyCacheKeys)))
	}
	limits := []core.Limit{ipLimit, userLimit}
	scopes := []string{"ip", "user"}
	held := ipLimit.Algorithm == core.Concurrency
	m := &keysModel{charged: map[string]int{}, inFlight: map[string]int{}}
	deadline := time.Now().Add(20 * time.Second)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 35))
			lim := lims[g%len(lims)]
			for range 30 {
				if time.Now().After(deadline) {
					return
				}
				keys := []string{fmt.Sprintf("ip:%d", rng.IntN(3)), fmt.Sprintf("user:%d", rng.IntN(4))}
				if err := m.request(ctx, lim, rng, keys, limits, scopes, held); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d admitted, %d denied", m.admitted, m.denied)
	if m.admitted == 0 || m.denied == 0 {
		t.Errorf("%d admitted, %d denied: the check needs both", m.admitted, m.denied)
	}
	for i, key := range []string{"ip:0", "ip:1", "ip:2", "user:0", "user:1", "user:2", "user:3"} {
		l, scope := limits[min(i/3, 1)], scopes[min(i/3, 1)]
		d, err := lims[0].Decide(ctx, &core.Request{Key: key, Limits: []core.Limit{l}, Scopes: []string{scope}, N: 0, Reserve: held})
		if err != nil {
			t.Fatal(err)
		}
		want := l.Capacity() - m.charged[key]
		if held {
			want = l.Capacity() // every slot freed
		}
		if d.Remaining != want {
			t.Errorf("%s (%v): Redis has %d remaining, the model %d (charged %d): a denied request was charged, or an admitted one lost",
				key, l, d.Remaining, want, m.charged[key])
		}
	}
}

// request sends one request of keys and records what it was charged: a
// plain decision, a reservation whose cost stands, or one refunded; for
// Concurrency limits (held), a reservation held a moment and released.
func (m *keysModel) request(ctx context.Context, lim *core.Limiter, rng *rand.Rand, keys []string, limits []core.Limit, scopes []string, held bool) error {
	mode := rng.IntN(3)
	if held {
		mode = 3
	}
	q := &core.Request{Keys: keys, Limits: limits, Scopes: scopes, N: 1, Reserve: mode > 0}
	d, err := lim.Decide(ctx, q)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !d.Allowed {
		m.denied++
		return nil
	}
	m.admitted++
	switch mode {
	case 2: // refunded: charged nothing
		return d.Reservation.Settle(ctx, 0)
	case 3: // in flight until released
		for i, key := range keys {
			if m.inFlight[key]++; m.inFlight[key] > limits[i].Rate {
				return fmt.Errorf("%d requests of %s in flight, above %v", m.inFlight[key], key, limits[i])
			}
		}
		m.mu.Unlock()
		time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
		m.mu.Lock()
		for _, key := range keys {
			m.inFlight[key]--
		}
		return d.Reservation.Release(ctx)
	}
	for _, key := range keys {
		m.charged[key]++
	}
	if mode == 1 {
		return d.Reservation.Release(ctx)
	}
	return nil
}

// TestDecideKeysDenied: a user name's denial is charged to neither key,
// on every Redis: the address's allowance stays whole, and the user
// name's denial is the binding result; the keys after the denying one
// read allowed. A reservation of several keys settles each.
func TestDecideKeysDenied(t *testing.T) {
	t.Parallel()
	keysBackends(t, func(t *testing.T, newLimiter func(opts ...core.Option) *core.Limiter) {
		ctx := context.Background()
		lim := newLimiter(core.WithPrefix(uniquePrefix()))
		limits := []core.Limit{keysLimit(core.FixedWindow, 10), keysLimit(core.SlidingLog, 2)}
		ask := func(ip, user string, reserve bool) core.Decision {
			t.Helper()
			each := make([]core.Result, 2)
			d, err := lim.Decide(ctx, &core.Request{Keys: []string{ip, user}, Limits: limits, N: 1, Each: each, Reserve: reserve})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		for range 2 {
			if d := ask("ip:a", "user:bob", false); !d.Allowed {
				t.Fatalf("denied: %+v", d.Result)
			}
		}
		for range 5 { // bob is locked out; the addresses are charged nothing
			if d := ask("ip:b", "user:bob", false); d.Allowed || d.Binding != 1 || d.RetryAfter <= 0 {
				t.Fatalf("bob's third: %+v, binding %d; want denied by the user name's limit", d.Result, d.Binding)
			}
		}
		r := ask("ip:b", "user:carol", true)
		if !r.Allowed || r.Remaining != 1 {
			t.Fatalf("carol from b: %+v; want allowed, 1 remaining (the user name's)", r.Result)
		}
		if err := r.Reservation.SettleEach(ctx, []int{1, 0}); err != nil { // the address charged, carol refunded
			t.Fatal(err)
		}
		if err := r.Reservation.Release(ctx); !errors.Is(err, core.ErrSettled) {
			t.Errorf("a second settlement: %v, want ErrSettled", err)
		}
		for key, want := range map[string]int{"ip:a": 8, "ip:b": 9} {
			if res, err := lim.AllowN(ctx, key, limits[0], 0); err != nil || res.Remaining != want {
				t.Errorf("%s: %d remaining, %v; want %d", key, res.Remaining, err, want)
			}
		}
		if res, err := lim.AllowN(ctx, "user:carol", limits[1], 0); err != nil || res.Remaining != 2 {
			t.Errorf("carol: %d remaining, %v; want 2 (refunded)", res.Remaining, err)
		}
	})
}

// TestDecideKeysCachedDenial: where the keys are decided apart, a key the
// deny cache holds is asked first, so a flood on a denied user name
// reaches Redis with no script call, and charges no address.
func TestDecideKeysCachedDenial(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t)
	admin := s.Client(t)
	ctx := context.Background()
	lim := core.New(s.Client(t), patient, core.WithBatchScript(false), core.WithPrefix(uniquePrefix()))
	limits := []core.Limit{keysLimit(core.GCRA, 100), keysLimit(core.GCRA, 1)}
	decide := func(ip string) core.Decision {
		d, err := lim.Decide(ctx, &core.Request{Keys: []string{ip, "user:bob"}, Limits: limits, N: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if !decide("ip:0").Allowed || decide("ip:1").Allowed {
		t.Fatal("want bob's first allowed, his second denied")
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if d := decide(fmt.Sprintf("ip:%d", i%7)); d.Allowed || !d.Cached {
			t.Fatalf("flood request %d: %+v; want a cached denial", i, d.Result)
		}
	}
	stats, err := redistest.CommandStats(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if n := stats["evalsha"].Calls + stats["eval"].Calls; n != 0 {
		t.Errorf("%v script calls for 50 requests on a denied user name; want 0", n)
	}
	if res, err := lim.AllowN(ctx, "ip:1", limits[0], 0); err != nil || res.Remaining != 100 {
		t.Errorf("ip:1: %d remaining, %v; want 100: its denied request was refunded", res.Remaining, err)
	}
}

// TestLocalKeys: FailLocal's stand-in decides several keys all or
// nothing too: a denial by one key's limit charges the other's nothing.
func TestLocalKeys(t *testing.T) {
	t.Parallel()
	lim := core.New(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	local := lim.Local(100)
	// Limits of a minute start full in process (a longer one admits its
	// outage's share: docs/faults.md).
	limits := []core.Limit{core.PerMinute(3), core.PerMinute(1)}
	decide := func(ip, user string) bool {
		return local.Decide(&core.Request{Keys: []string{ip, user}, Limits: limits, N: 1}).Allowed
	}
	got := fmt.Sprint(decide("ip:a", "user:bob"), decide("ip:a", "user:bob"), decide("ip:a", "user:bob"),
		decide("ip:a", "user:carol"), decide("ip:a", "user:dave"), decide("ip:a", "user:erin"))
	if want := "true false false true true false"; got != want {
		t.Errorf("got %s, want %s: bob's denials charged address a nothing, its 3rd request is dave's", got, want)
	}
}

// BenchmarkDecideKeys: what deciding two keys of one request costs (an
// address and a user name, a limit each), on one redis-server: one key's
// two limits (AllowAll's cost) beside two keys in one script (one server),
// and two keys decided apart as on a Cluster (WithBatchScript(false), so
// that one server's INFO commandstats counts every call): admitted, denied
// by the second key (reserved, denied, refunded: the deny cache off), and
// denied by a key the deny cache holds. server-us/op is the server's
// script time per request, scripts/op the script calls per request.
func BenchmarkDecideKeys(b *testing.B) {
	rdb := redistest.Standalone(b).Client(b)
	ctx := context.Background()
	ips, users := make([]string, 1000), make([]string, 1000)
	for i := range ips {
		ips[i], users[i] = fmt.Sprintf("ip:%d", i), fmt.Sprintf("user:%d", i)
	}
	open := []core.Limit{{Rate: 1_000_000, Period: time.Second}, {Algorithm: core.FixedWindow, Rate: 1_000_000_000, Period: time.Hour}}
	shut := []core.Limit{open[0], {Algorithm: core.FixedWindow, Rate: 1, Period: time.Hour}}
	for _, c := range []struct {
		name   string
		opts   []core.Option
		limits []core.Limit
		keys   func(i int) []string
	}{
		{"one_key_two_limits", nil, open, func(i int) []string { return []string{ips[i], ips[i]} }},
		{"two_keys_one_script", nil, open, func(i int) []string { return []string{ips[i], users[i]} }},
		{"two_keys_apart_admitted", []core.Option{core.WithBatchScript(false)}, open, func(i int) []string { return []string{ips[i], users[i]} }},
		{"two_keys_apart_denied_by_the_second", []core.Option{core.WithBatchScript(false), core.WithDenyCache(0)}, shut,
			func(i int) []string { return []string{ips[i], "user:locked"} }},
		{"two_keys_apart_denied_cached", []core.Option{core.WithBatchScript(false)}, shut,
			func(i int) []string { return []string{ips[i], "user:locked"} }},
	} {
		b.Run(c.name, func(b *testing.B) {
			lim := core.New(rdb, append([]core.Option{patient, core.WithPrefix(uniquePrefix())}, c.opts...)...)
			decide := func(i int) error {
				_, err := lim.Decide(ctx, &core.Request{Keys: c.keys(i % len(ips)), Limits: c.limits, N: 1})
				return err
			}
			for i := range 3 { // loads the scripts, locks the user out
				if err := decide(i); err != nil {
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
					if err := decide(i); err != nil {
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
			b.ReportMetric((stats["evalsha"].Usec+stats["eval"].Usec)/float64(b.N), "server-us/op")
			b.ReportMetric((stats["evalsha"].Calls+stats["eval"].Calls)/float64(b.N), "scripts/op")
		})
	}
}

// TestDecideKeysOneDeadline: on a Cluster, where a decision of several
// keys asks each key's node in turn, the keys share the decision's one
// timeout: three masters each held back longer than the one before (300,
// 700, 1100 ms; a timeout of 500 ms) end the decision with ErrTimeout once
// the timeout is used up, not after the three answers (1.1 s: each key
// waits 300 or 400 ms, within a timeout of its own). Whether the first key was refunded depends
// on whether it answered in time, which a loaded machine decides: refunds
// are TestDecideKeysDenied's.
func TestDecideKeysOneDeadline(t *testing.T) {
	t.Parallel()
	c := redistest.NewCluster(t, 3)
	rdb := c.Client(t)
	ctx := context.Background()
	const timeout = 500 * time.Millisecond
	lim := core.New(rdb, core.WithPrefix(uniquePrefix()), core.WithTimeout(timeout), core.WithBreaker(0), core.WithDenyCache(0))
	var keys []string
	var masters []*redistest.Server
	for i := 0; len(keys) < 3 && i < 1000; i++ { // a key on each master
		key := fmt.Sprint("u", i)
		if owner := c.Owner(t, redistest.Slot("{"+key+"}")); !slices.Contains(masters, owner) {
			keys, masters = append(keys, key), append(masters, owner)
		}
	}
	if len(keys) != 3 {
		t.Fatalf("keys %v: want one on each of 3 masters", keys)
	}
	limits := []core.Limit{core.PerMinute(10), core.PerMinute(10), core.PerMinute(10)}
	ask := &core.Request{Keys: keys, Limits: limits, N: 1}
	if _, err := core.New(rdb, core.WithPrefix(uniquePrefix()), patient).Decide(ctx, ask); err != nil { // connections made, the script loaded
		t.Fatal(err)
	}
	if _, err := lim.Decide(ctx, ask); err != nil {
		t.Fatal(err)
	}
	for i, m := range masters {
		m.SlowFor(t, []time.Duration{300, 700, 1100}[i]*time.Millisecond)
	}
	began := time.Now()
	_, err := lim.Decide(ctx, ask)
	took := time.Since(began)
	if !errors.Is(err, core.ErrTimeout) {
		t.Fatalf("err %v after %v; want ErrTimeout: the keys share one timeout", err, took)
	}
	// Each key on a timeout of its own is answered after 1.1 s; one
	// timeout shared ends at 500 ms, or soon after on a slow machine.
	if took >= 900*time.Millisecond {
		t.Errorf("failed after %v: longer than a shared timeout of %v allows", took, timeout)
	}
}
