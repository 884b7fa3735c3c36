package core_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// roundTrips is a go-redis hook that counts what a client sends: round
// trips (single commands and pipelines of scripts), the decisions run in
// them (a batch script call holds several), the round trips that carried more
// than one decision, the most decisions in one, and the most round trips
// in flight at once.
type roundTrips struct {
	trips, decisions, shared, batchCalls atomic.Int64
	inFlight, maxInFlight, largest       atomic.Int64
	widest                               atomic.Int64 // the most commands in one round trip
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isScript(cmd) { // a connection's handshake
			return next(ctx, cmd)
		}
		leave := h.enter([]redis.Cmder{cmd})
		err := next(ctx, cmd) // go-redis sets it on cmd after the hooks
		cmd.SetErr(err)
		leave()
		return err
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, isScript) {
			return next(ctx, cmds)
		}
		defer h.enter(cmds)()
		return next(ctx, cmds)
	}
}

// reset zeroes the counts.
func (h *roundTrips) reset() {
	for _, a := range []*atomic.Int64{&h.trips, &h.decisions, &h.shared, &h.batchCalls, &h.maxInFlight, &h.largest, &h.widest} {
		a.Store(0)
	}
}

// warm makes one decision, so that the server has the script (the first
// decision gets NOSCRIPT and is sent again), and zeroes the counts.
func (h *roundTrips) warm(t *testing.T, lim *core.Limiter, l core.Limit) {
	t.Helper()
	if _, err := lim.Allow(context.Background(), "warm-up", l); err != nil {
		t.Fatal(err)
	}
	h.reset()
}

func isScript(cmd redis.Cmder) bool {
	name := cmd.Name()
	return (name == "evalsha" || name == "eval") && !core.IsLossCheck(cmd.Args())
}

// decisionsIn counts the decisions in a script call: one, or for a batch
// those its ARGV lay out (lua/src/main.lua).
func (h *roundTrips) decisionsIn(cmd redis.Cmder) int64 {
	args := cmd.Args()
	if core.IsLossCheck(args) { // the background's, not a decision
		return 0
	}
	if !core.IsBatch(args) {
		return 1
	}
	h.batchCalls.Add(1)
	return int64(core.BatchCalls(args))
}

// enter begins a round trip of cmds; leave ends it and counts it. A call
// the server refused as NOSCRIPT ran no decision: it is not counted.
func (h *roundTrips) enter(cmds []redis.Cmder) (leave func()) {
	raise(&h.maxInFlight, h.inFlight.Add(1))
	raise(&h.widest, int64(len(cmds)))
	return func() {
		h.inFlight.Add(-1)
		var n int64
		for _, cmd := range cmds {
			if !redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
				n += h.decisionsIn(cmd)
			}
		}
		h.trips.Add(1)
		h.decisions.Add(n)
		if n > 1 {
			h.shared.Add(1)
		}
		raise(&h.largest, n)
	}
}

func raise(a *atomic.Int64, v int64) {
	for old := a.Load(); v > old && !a.CompareAndSwap(old, v); old = a.Load() {
	}
}

// hammer runs n decisions of l on each of goroutines goroutines, for the
// keys key gives, and returns how many were allowed.
func hammer(t *testing.T, lim *core.Limiter, goroutines, n int, l core.Limit, key func(g, i int) string) int64 {
	t.Helper()
	return decideFrom(t, goroutines, n, func(g, i int) (core.Result, error) {
		return lim.Allow(context.Background(), key(g, i), l)
	})
}

// decideFrom runs n decisions on each of goroutines goroutines, within 30
// seconds, and returns how many were allowed; an error, or running out of
// time, fails the test.
func decideFrom(t *testing.T, goroutines, n int, decide func(g, i int) (core.Result, error)) int64 {
	t.Helper()
	var allowed, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	deadline := time.Now().Add(30 * time.Second)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n && time.Now().Before(deadline); i++ {
				res, err := decide(g, i)
				if err != nil {
					errs <- err
					return
				}
				done.Add(1)
				if res.Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if want := int64(goroutines * n); done.Load() < want {
		t.Fatalf("only %d of %d decisions ran within 30 s", done.Load(), want)
	}
	return allowed.Load()
}

// TestBatching: concurrent decisions share round trips, within the batch
// size and the pipelines in flight; a lone decision is sent at once, alone.
func TestBatching(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	rdb := srv.Client(t)
	h := &roundTrips{}
	rdb.AddHook(h)
	const batch, pipelines = 16, 2
	lim := core.New(rdb, core.WithPrefix(uniquePrefix()), core.WithBatchSize(batch), core.WithPipelines(pipelines), patient)
	h.warm(t, lim, core.PerHour(5))
	if res, err := lim.Allow(context.Background(), "alone", core.PerHour(5)); err != nil || !res.Allowed {
		t.Fatalf("lone decision: %+v, %v", res, err)
	}
	if h.trips.Load() != 1 || h.decisions.Load() != 1 {
		t.Fatalf("a lone decision took %d round trips carrying %d decisions, want 1", h.trips.Load(), h.decisions.Load())
	}

	const goroutines, each = 64, 50
	l := core.PerHour(1_000_000)
	h.warm(t, lim, l)
	allowed := hammer(t, lim, goroutines, each, l, func(g, i int) string { return fmt.Sprintf("k%d", (g*each+i)%500) })
	decisions := int64(goroutines * each)
	if allowed != decisions {
		t.Fatalf("%d of %d allowed under a limit nothing reaches", allowed, decisions)
	}
	trips := h.trips.Load()
	t.Logf("%d decisions in %d round trips (%d shared, %d batch script calls, largest %d); at most %d in flight",
		decisions, trips, h.shared.Load(), h.batchCalls.Load(), h.largest.Load(), h.maxInFlight.Load())
	if got := h.decisions.Load(); got != decisions {
		t.Fatalf("%d decisions sent for %d: each must be sent exactly once", got, decisions)
	}
	if h.batchCalls.Load() == 0 {
		t.Error("no batch went as one call of the batch script to a single server")
	}
	if trips >= decisions/2 {
		t.Errorf("%d round trips for %d concurrent decisions: they are not being shared", trips, decisions)
	}
	if h.largest.Load() > batch {
		t.Errorf("a round trip of %d decisions; the batch size is %d", h.largest.Load(), batch)
	}
	if h.maxInFlight.Load() > pipelines {
		t.Errorf("%d round trips in flight at once; at most %d allowed", h.maxInFlight.Load(), pipelines)
	}
}

// wrapped is a user's own client type: a go-redis client behind an
// interface, as instrumentation wraps one.
type wrapped struct{ redis.UniversalClient }

// TestWrappedClientBatches: a client of the user's own type that forwards
// go-redis's methods keeps batching, as the client it wraps would (the
// transport asks for the methods it uses, not for go-redis's types).
func TestWrappedClientBatches(t *testing.T) {
	t.Parallel()
	rdb := redistest.Standalone(t).Client(t)
	h := &roundTrips{}
	rdb.AddHook(h)
	lim := core.New(wrapped{rdb}, core.WithPrefix(uniquePrefix()), core.WithPipelines(1), patient)
	l := core.PerHour(1_000_000)
	h.warm(t, lim, l)
	const goroutines, each = 32, 20
	if allowed := hammer(t, lim, goroutines, each, l, func(g, i int) string { return fmt.Sprintf("k%d", (g*each+i)%100) }); allowed != goroutines*each {
		t.Fatalf("%d of %d allowed under a limit nothing reaches", allowed, goroutines*each)
	}
	if trips := h.trips.Load(); h.batchCalls.Load() == 0 || trips >= goroutines*each/2 {
		t.Errorf("%d decisions in %d round trips, %d batch script calls: a wrapped client lost batching", goroutines*each, trips, h.batchCalls.Load())
	}
}

// TestBatchingOff: WithBatchSize(1) sends every decision on its own.
func TestBatchingOff(t *testing.T) {
	t.Parallel()
	rdb := redistest.Standalone(t).Client(t)
	h := &roundTrips{}
	rdb.AddHook(h)
	lim := core.New(rdb, core.WithPrefix(uniquePrefix()), core.WithBatchSize(1), core.WithPipelines(8), patient)
	h.warm(t, lim, core.PerHour(1000))
	hammer(t, lim, 32, 20, core.PerHour(1000), func(g, i int) string { return fmt.Sprint(g) })
	if h.shared.Load() != 0 || h.trips.Load() != 32*20 {
		t.Fatalf("%d round trips, %d of them shared, for %d decisions; want one each", h.trips.Load(), h.shared.Load(), 32*20)
	}
}

// TestPipelinedScriptFlush: after SCRIPT FLUSH, decisions sent together in
// pipelines get NOSCRIPT and are sent again with the source, once each.
func TestPipelinedScriptFlush(t *testing.T) {
	t.Parallel()
	redistest.Servers(t, func(t *testing.T, newClient func() redis.UniversalClient) {
		rdb := newClient()
		lim := core.New(rdb, core.WithPrefix(uniquePrefix()), core.WithPipelines(1), patient)
		l := core.PerHour(1000)
		for round := 0; round < 3; round++ {
			flushAll(t, rdb)
			// 20 keys of 10 decisions each: every key must have counted 10.
			hammer(t, lim, 20, 10, l, func(g, i int) string { return fmt.Sprint("k", g) })
		}
		for g := 0; g < 20; g++ {
			res, err := lim.AllowN(context.Background(), fmt.Sprint("k", g), l, 0)
			if err != nil || res.Remaining != l.Rate-30 {
				t.Fatalf("key k%d after 3 x 10 decisions: %+v, %v; want Remaining %d", g, res, err, l.Rate-30)
			}
		}
	})
}

// flushAll empties the script cache of every node.
func flushAll(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() })
	} else {
		err = rdb.ScriptFlush(ctx).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestRing: a Ring shards keys over servers by their hash tag; decisions
// are exact on it, batched or not.
func TestRing(t *testing.T) {
	t.Parallel()
	a, b := redistest.Standalone(t), redistest.Standalone(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
	t.Cleanup(func() { ring.Close() })
	for _, batch := range []int{1, core.DefaultBatchSize} {
		lim := core.New(ring, core.WithPrefix(uniquePrefix()), core.WithBatchSize(batch), patient)
		l := core.PerHour(10)
		// 40 keys x 20 attempts each: exactly 10 of each key's pass.
		allowed := hammer(t, lim, 40, 20, l, func(g, i int) string { return fmt.Sprint("user", g) })
		if allowed != 40*10 {
			t.Fatalf("batch %d: %d allowed, want %d", batch, allowed, 40*10)
		}
	}
	// Both shards hold state: the keys were spread.
	for _, s := range []*redistest.Server{a, b} {
		if n := s.Client(t).DBSize(context.Background()).Val(); n == 0 {
			t.Errorf("shard %s holds no keys", s.Addr)
		}
	}
}

// scripterOnly has the redis.Scripter methods of a client and nothing else,
// like a wrapper a user might write.
type scripterOnly struct{ redis.Scripter }

// TestScripterOnly: a Scripter that cannot pipeline or Process is asked
// through its Eval methods, and handles NOSCRIPT too.
func TestScripterOnly(t *testing.T) {
	t.Parallel()
	rdb := redistest.Standalone(t).Client(t)
	lim := core.New(scripterOnly{rdb}, core.WithPrefix(uniquePrefix()), patient)
	l := core.PerHour(5)
	for i := 0; i < 2; i++ {
		flushAll(t, rdb)
		if allowed := hammer(t, lim, 8, 4, l, func(g, _ int) string { return fmt.Sprint("k", i) }); allowed != 5 {
			t.Fatalf("%d allowed, want 5", allowed)
		}
	}
	if err := lim.Reset(context.Background(), "k0", l); err != nil {
		t.Fatal(err)
	}
	if res, err := lim.Allow(context.Background(), "k0", l); err != nil || res.Remaining != 4 {
		t.Fatalf("after Reset: %+v, %v", res, err)
	}
}

// TestTimeoutAndContext: a Redis that never answers costs a decision its
// timeout, or its context's deadline if that comes first, or nothing at all
// if the context is already done; errors say which.
func TestTimeoutAndContext(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Silent(t)})
	t.Cleanup(func() { rdb.Close() })
	l := core.PerHour(1)

	lim := core.New(rdb, core.WithTimeout(50*time.Millisecond), core.WithBreaker(0))
	_, err := lim.Allow(context.Background(), "k", l)
	if !errors.Is(err, core.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "within 50ms") {
		t.Fatalf("silent Redis: %v, want ErrTimeout and DeadlineExceeded within 50ms", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = lim.Allow(ctx, "k", l)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, core.ErrTimeout) {
		t.Fatalf("context deadline first: %v, want the context's DeadlineExceeded, not ErrTimeout", err)
	}

	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	if _, err := lim.Allow(done, "k", l); !errors.Is(err, context.Canceled) {
		t.Fatalf("context already done: %v, want Canceled", err)
	}

	// No timeout: only the context bounds it.
	none := core.New(rdb, core.WithTimeout(0), core.WithBreaker(0))
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	if _, err := none.Allow(ctx2, "k", l); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, core.ErrTimeout) {
		t.Fatalf("WithTimeout(0): %v, want the context's deadline", err)
	}
}

// TestRequestTimeout: a Request's Timeout bounds its decision in place of
// the Limiter's when it is shorter, or when the Limiter has none; a
// longer one changes nothing. Errors say which bound it was.
func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Silent(t)})
	t.Cleanup(func() { rdb.Close() })
	limits := []core.Limit{core.PerHour(1)}
	for _, c := range []struct {
		limiter, request time.Duration
		within           string
	}{
		{50 * time.Millisecond, 20 * time.Millisecond, "within 20ms"},
		{50 * time.Millisecond, time.Hour, "within 50ms"},
		{0, 30 * time.Millisecond, "within 30ms"},
	} {
		lim := core.New(rdb, core.WithTimeout(c.limiter), core.WithBreaker(0))
		_, err := lim.Decide(context.Background(), &core.Request{Key: "k", Limits: limits, N: 1, Timeout: c.request})
		if !errors.Is(err, core.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), c.within) {
			t.Errorf("Limiter's timeout %v, the request's %v: %v; want ErrTimeout %s", c.limiter, c.request, err, c.within)
		}
	}
}

// TestQueueBound: when every sender is stuck and the queue is full, a
// decision fails at once with ErrUnavailable instead of waiting.
func TestQueueBound(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Silent(t)})
	t.Cleanup(func() { rdb.Close() })
	lim := core.New(rdb, core.WithBatchSize(1), core.WithPipelines(1), core.WithTimeout(0), core.WithBreaker(0))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var full atomic.Int64
	const callers = 1100 // the sender holds 1, the queue 1024
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := lim.Allow(ctx, "k", core.PerHour(1)); errors.Is(err, core.ErrUnavailable) {
				full.Add(1)
				cancel() // the rest may go
			}
		}()
	}
	wg.Wait()
	if full.Load() == 0 {
		t.Fatal("no decision was refused with ErrUnavailable though the queue was full")
	}
}

// TestDirect: with a client that bounds commands by their context's
// deadline (ContextTimeoutEnabled), an idle Limiter sends each decision
// from the caller's goroutine: no sender runs for sequential decisions,
// concurrent ones still share round trips, and a stopped Redis still
// costs a decision no more than its timeout, cancelled or not, or its
// context's deadline when that comes first. On go-redis's defaults every
// decision goes through a sender.
func TestDirect(t *testing.T) {
	srv := redistest.Standalone(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	trips := &roundTrips{}
	rdb.AddHook(trips)
	ctx := context.Background()
	l := core.Limit{Rate: 1000, Period: time.Hour}

	lim := core.New(rdb, core.WithPrefix(uniquePrefix()), core.WithTimeout(500*time.Millisecond))
	for i := 0; i < 20; i++ {
		if res, err := lim.Allow(ctx, "seq", l); err != nil || res.Remaining != 999-i {
			t.Fatalf("decision %d: %+v, %v", i, res, err)
		}
	}
	if n := lim.Senders(); n != 0 {
		t.Fatalf("%d senders ran for sequential decisions; want them sent by their callers", n)
	}
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { plain.Close() })
	viaSender := core.New(plain, core.WithPrefix(uniquePrefix()))
	if _, err := viaSender.Allow(ctx, "seq", l); err != nil || viaSender.Senders() != 1 {
		t.Fatalf("on go-redis's defaults: %v, %d senders; want the decision sent by a sender", err, viaSender.Senders())
	}

	// SCRIPT FLUSH: NOSCRIPT, then EVAL, from the caller too.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if res, err := lim.Allow(ctx, "seq", l); err != nil || res.Remaining != 979 {
		t.Fatalf("after SCRIPT FLUSH: %+v, %v", res, err)
	}

	// Concurrent decisions: exact, and most of them share round trips.
	trips.reset()
	if allowed := hammer(t, lim, 32, 40, l, func(int, int) string { return "hot" }); allowed != 1000 {
		t.Fatalf("%d allowed of 1280 on a limit of 1000", allowed)
	}
	if trips.shared.Load() == 0 {
		t.Fatalf("32 goroutines never shared a round trip (%d round trips)", trips.trips.Load())
	}

	// A stopped Redis: the timeout, or the context's cancellation no later
	// than it, or its deadline, bounds the caller doing its own I/O.
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	_, err := lim.Allow(ctx, "stopped", l)
	if took := time.Since(start); !errors.Is(err, core.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || took > 2*time.Second {
		t.Fatalf("stopped Redis: %v after %v, want ErrTimeout at about 500ms", err, took)
	}
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, cancel)
	start = time.Now()
	_, err = lim.Allow(cctx, "stopped", l)
	if took := time.Since(start); !errors.Is(err, context.Canceled) || took > 2*time.Second {
		t.Fatalf("cancelled while Redis is stopped: %v after %v, want Canceled by the timeout", err, took)
	}
	dctx, cancelD := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelD()
	start = time.Now()
	_, err = lim.Allow(dctx, "stopped", l)
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, core.ErrTimeout) || took > 2*time.Second {
		t.Fatalf("deadline before the timeout while Redis is stopped: %v after %v, want the context's DeadlineExceeded", err, took)
	}
}

// TestDecisionAllocations: a decision costs at most 7 allocations, the
// Limiter's I/O goroutine and go-redis included (a bare EVALSHA costs 8),
// alone (handed to a sender) and when decisions share a batch script
// call; 12 sent by its caller on a client with ContextTimeoutEnabled. Under the race
// detector, which drops pooled objects at random, the bound is 10.
func TestDecisionAllocations(t *testing.T) {
	rdb := redistest.Standalone(t).Client(t)
	lim := core.New(rdb, core.WithPrefix(uniquePrefix()), patient)
	l := core.PerHour(1_000_000)
	ctx := context.Background()
	allow := func() {
		if _, err := lim.Allow(ctx, "k", l); err != nil {
			t.Fatal(err)
		}
	}
	allow() // loads the script
	bound := 7.0
	if raceEnabled {
		bound = 10
	}
	if n := testing.AllocsPerRun(200, allow); n > bound {
		t.Errorf("%.1f allocations per decision alone, want at most %v", n, bound)
	}

	// On a client with ContextTimeoutEnabled the caller sends its own
	// decision, under a context that ends at its deadline:
	// context.WithDeadline's 5 allocations more (its context, timer,
	// channel and functions; docs/performance.md).
	direct := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { direct.Close() })
	dlim := core.New(direct, core.WithPrefix(uniquePrefix()), patient)
	if _, err := dlim.Allow(ctx, "k", l); err != nil {
		t.Fatal(err)
	}
	dbound := bound + 5
	if raceEnabled {
		dbound = 18 // three pools on this path, each dropped at random under -race
	}
	if n := testing.AllocsPerRun(200, func() { _, _ = dlim.Allow(ctx, "k", l) }); n > dbound {
		t.Errorf("%.1f allocations per direct decision, want at most %v", n, dbound)
	}

	// 16 goroutines: most decisions share round trips.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const goroutines, each = 16, 200
	hammer(t, lim, goroutines, each, l, func(g, i int) string { return "shared" })
	runtime.ReadMemStats(&after)
	if n := float64(after.Mallocs-before.Mallocs) / (goroutines * each); n > bound {
		t.Errorf("%.1f allocations per decision under load, want at most %v", n, bound)
	}
}

// TestCachedDenialAllocations: a denial the deny cache answers costs one
// allocation (the name of the key's state), the limit passed by value
// included: nothing of the caller's goes to the heap.
func TestCachedDenialAllocations(t *testing.T) {
	lim, _, _ := miniLimiter(t)
	l := core.PerHour(1)
	ctx := context.Background()
	allowN(t, lim, "k", l, 1)
	if res := allowN(t, lim, "k", l, 1); res.Allowed {
		t.Fatal("the second of 1/h was allowed")
	}
	deny := func() {
		if res, err := lim.Allow(ctx, "k", l); err != nil || !res.Cached {
			t.Fatalf("%+v, %v; want a cached denial", res, err)
		}
	}
	if n := testing.AllocsPerRun(200, deny); n > 1 {
		t.Errorf("%.1f allocations per cached denial, want at most 1", n)
	}
}

// TestTimeoutsNameTheirCause: with Redis gone (connections refused) and
// no breaker, every decision fails with ErrTimeout or the client's own
// error, never a bare context.DeadlineExceeded, though a failing lane
// bounds its round trips by the decisions' deadline (which go-redis then
// reports as its own error); once the lane has failed, a timeout names
// what it failed with.
func TestTimeoutsNameTheirCause(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr}) // go-redis's defaults: 5 dials, 100 ms apart
	t.Cleanup(func() { rdb.Close() })
	lim := core.New(rdb, core.WithBreaker(0), core.WithTimeout(50*time.Millisecond))
	ctx := context.Background()
	if _, err := lim.Allow(ctx, "k", core.PerHour(100)); err != nil && !errors.Is(err, core.ErrTimeout) {
		t.Fatal(err)
	}
	srv.Stop()
	named := 0
	for i := 0; i < 40; i++ {
		_, err := lim.Allow(ctx, "k", core.PerHour(100))
		switch {
		case err == nil:
			t.Fatalf("decision %d succeeded with Redis stopped", i)
		case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, core.ErrTimeout):
			t.Fatalf("decision %d: %v: a bare deadline, want ErrTimeout", i, err)
		case errors.Is(err, core.ErrTimeout) && strings.Contains(err.Error(), "connection refused"):
			named++
		}
	}
	if named == 0 {
		t.Fatal("no timeout named the refused connection behind it")
	}
	t.Logf("%d of 40 timeouts named the refused connection", named)
}
