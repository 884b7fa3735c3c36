package core_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// Wait and WaitN sleep in real time, so these tests run on a Redis clock
// that moves in real time (miniredis without SetTime reads the process's
// clock, as real Redis does) with short periods. They assert counts and
// order, and only lower bounds on time, which the limit guarantees: the
// server admits nothing early, whatever the load on the machine.

// realTimeLimiter is a Limiter on a miniredis of its own whose clock is
// the process's.
func realTimeLimiter(t *testing.T, opts ...core.Option) (*core.Limiter, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return core.New(rdb, append([]core.Option{patient, core.WithPrefix(uniquePrefix())}, opts...)...), m
}

// waitCtx bounds a test's waits, so a broken WaitN fails instead of hanging.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitAll runs WaitN(n) once in each of goroutines and returns when each
// one returned (sorted), with the first error.
func waitAll(ctx context.Context, lim *core.Limiter, key string, l core.Limit, n, goroutines int) ([]time.Time, error) {
	var (
		mu    sync.Mutex
		times []time.Time
		first error
		wg    sync.WaitGroup
	)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := lim.WaitN(ctx, key, l, n)
			mu.Lock()
			defer mu.Unlock()
			times = append(times, time.Now())
			if err != nil && first == nil {
				first = err
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	return times, first
}

// checkSpaced fails unless the i-th return came at least i*step after
// start (less a millisecond for the scripts' microsecond clock).
func checkSpaced(t *testing.T, start time.Time, times []time.Time, step time.Duration) {
	t.Helper()
	for i, at := range times {
		if got, want := at.Sub(start), time.Duration(i)*step-time.Millisecond; got < want {
			t.Fatalf("waiter %d of %d returned %v after the start, before its turn at %v", i+1, len(times), got, want)
		}
	}
}

// TestWaitSpacesWaiters: waiters on a burst of 1 are each admitted, one
// interval apart, never early; WaitN of a cost takes its cost's time.
func TestWaitSpacesWaiters(t *testing.T) {
	t.Parallel()
	for _, algo := range []core.Algorithm{core.GCRA, core.TokenBucket, core.LeakyBucket} {
		t.Run(string(algo), func(t *testing.T) {
			t.Parallel()
			ctx := waitCtx(t) // here: a parallel subtest may start long after its parent
			lim, _ := realTimeLimiter(t)
			step := 20 * time.Millisecond
			l := core.Limit{Algorithm: algo, Rate: 1, Period: step, Burst: 1}
			start := time.Now()
			times, err := waitAll(ctx, lim, "k", l, 1, 6)
			if err != nil {
				t.Fatal(err)
			}
			checkSpaced(t, start, times, step)

			// A cost of 4 at 4 per 40 ms: the second waits for 4 to drain.
			l = core.Limit{Algorithm: algo, Rate: 4, Period: 2 * step, Burst: 4}
			start = time.Now()
			times, err = waitAll(ctx, lim, "n", l, 4, 2)
			if err != nil {
				t.Fatal(err)
			}
			checkSpaced(t, start, times, l.Period)
		})
	}
}

// TestWaitShapingSleepsDelay: a shaping leaky bucket admits every waiter at
// once with its place in the queue, and WaitN sleeps until that place:
// waiters return Period/Rate apart.
func TestWaitShapingSleepsDelay(t *testing.T) {
	t.Parallel()
	lim, _ := realTimeLimiter(t)
	step := 20 * time.Millisecond
	l := core.Limit{Algorithm: core.LeakyBucket, Shape: true, Rate: 1, Period: step, Burst: 10}
	start := time.Now()
	times, err := waitAll(waitCtx(t), lim, "k", l, 1, 5)
	if err != nil {
		t.Fatal(err)
	}
	checkSpaced(t, start, times, step)
}

// TestWaitContextCancel: a waiter returns ctx.Err() as soon as its context
// is cancelled, long before its turn; a context ended before the call
// sends nothing.
func TestWaitContextCancel(t *testing.T) {
	t.Parallel()
	lim, m := realTimeLimiter(t)
	l := core.PerHour(1)
	if _, err := lim.Allow(context.Background(), "k", l); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(30*time.Millisecond, cancel)
	defer stop.Stop()
	began := time.Now()
	err := lim.Wait(ctx, "k", l)
	if err != context.Canceled {
		t.Fatalf("Wait cancelled while waiting for an hour: err %v, want context.Canceled itself", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("Wait took %v to notice the cancellation", took)
	}

	// Cancelled before the call: nothing reaches Redis.
	sent := m.CommandCount()
	if err := lim.Wait(ctx, "k", l); err != context.Canceled {
		t.Fatalf("Wait with a cancelled context: err %v, want context.Canceled", err)
	}
	if got := m.CommandCount(); got != sent {
		t.Fatalf("Wait with a cancelled context sent %d commands", got-sent)
	}

	// The same while sleeping a shaping Delay.
	shape := core.Limit{Algorithm: core.LeakyBucket, Shape: true, Rate: 1, Period: time.Hour, Burst: 5}
	if err := lim.Wait(context.Background(), "q", shape); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	stop = time.AfterFunc(30*time.Millisecond, cancel)
	defer stop.Stop()
	if err := lim.Wait(ctx, "q", shape); err != context.Canceled {
		t.Fatalf("Wait cancelled while queued for an hour: err %v, want context.Canceled", err)
	}
}

// TestWaitDeadline: when the context's deadline comes before the next
// try could succeed, Wait returns at once, before the deadline, with an
// error wrapping context.DeadlineExceeded; for a shaping limit, when the
// admitted event's place in the queue is past the deadline (it stays
// counted).
func TestWaitDeadline(t *testing.T) {
	t.Parallel()
	lim, _ := realTimeLimiter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	l := core.PerHour(1)
	if err := lim.Wait(ctx, "k", l); err != nil {
		t.Fatal(err)
	}
	err := lim.Wait(ctx, "k", l)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, core.ErrTimeout) {
		t.Fatalf("Wait for an hour with 10 s left: err %v, want one wrapping context.DeadlineExceeded", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Wait returned only once the deadline had passed")
	}
	if !strings.Contains(err.Error(), "deadline") {
		t.Errorf("error %q does not say why", err)
	}

	shape := core.Limit{Algorithm: core.LeakyBucket, Shape: true, Rate: 1, Period: time.Hour, Burst: 5}
	for i := range 2 {
		err := lim.Wait(ctx, "q", shape)
		if i == 0 && err != nil {
			t.Fatal(err)
		}
		if i == 1 && (!errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil) {
			t.Fatalf("queued for an hour with 10 s left: err %v, ctx %v; want DeadlineExceeded, before the deadline", err, ctx.Err())
		}
	}
	res, err := lim.AllowN(ctx, "q", shape, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Remaining != shape.Burst-2 {
		t.Fatalf("Remaining %d after two admitted shaped events, want %d", res.Remaining, shape.Burst-2)
	}
}

// scriptedRedis answers every script with reply (or err) and counts the
// calls: a redis.Scripter that is not a go-redis client.
type scriptedRedis struct {
	calls atomic.Int64
	reply []any
	err   error
}

func (s *scriptedRedis) cmd(ctx context.Context) *redis.Cmd {
	s.calls.Add(1)
	cmd := redis.NewCmd(ctx)
	if s.err != nil {
		cmd.SetErr(s.err)
	} else {
		cmd.SetVal(s.reply)
	}
	return cmd
}

func (s *scriptedRedis) Eval(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return s.cmd(ctx)
}

func (s *scriptedRedis) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return s.cmd(ctx)
}

func (s *scriptedRedis) EvalRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return s.cmd(ctx)
}

func (s *scriptedRedis) EvalShaRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return s.cmd(ctx)
}

func (s *scriptedRedis) ScriptExists(ctx context.Context, _ ...string) *redis.BoolSliceCmd {
	return redis.NewBoolSliceCmd(ctx)
}

func (s *scriptedRedis) ScriptLoad(ctx context.Context, _ string) *redis.StringCmd {
	return redis.NewStringCmd(ctx)
}

// TestWaitInvalid: what can never be admitted fails at once, with AllowN's
// errors, and nothing is sent.
func TestWaitInvalid(t *testing.T) {
	t.Parallel()
	rdb := &scriptedRedis{err: errors.New("nothing should be sent")}
	lim := core.New(rdb)
	ctx := waitCtx(t)
	l := core.Limit{Rate: 10, Period: time.Second, Burst: 5}
	for _, tc := range []struct {
		name   string
		key    string
		limit  core.Limit
		n      int
		want   error
		allowN bool // AllowN returns the same error
	}{
		{"empty key", "", l, 1, core.ErrInvalidKey, true},
		{"long key", strings.Repeat("x", core.MaxKeyLen+1), l, 1, core.ErrInvalidKey, true},
		{"invalid limit", "k", core.Limit{Rate: 10}, 1, core.ErrInvalidLimit, true},
		{"negative n", "k", l, -1, core.ErrInvalidCost, true},
		{"n above burst", "k", l, 6, core.ErrInvalidCost, false},
		{"n above a window's rate", "k", core.Limit{Algorithm: core.FixedWindow, Rate: 3, Period: time.Second}, 4, core.ErrInvalidCost, false},
	} {
		err := lim.WaitN(ctx, tc.key, tc.limit, tc.n)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
		if !tc.allowN {
			continue
		}
		if _, allowErr := lim.AllowN(ctx, tc.key, tc.limit, tc.n); allowErr == nil || err == nil || allowErr.Error() != err.Error() {
			t.Errorf("%s: WaitN's error %q is not AllowN's %q", tc.name, err, allowErr)
		}
	}
	if err := lim.WaitN(ctx, "k", l, 6); err == nil || !strings.Contains(err.Error(), "burst 5") {
		t.Errorf("n above burst: error %q does not name the burst", err)
	}
	if err := lim.WaitN(ctx, "k", l, 0); err != nil {
		t.Errorf("WaitN(n=0): %v, want nil", err)
	}
	if n := rdb.calls.Load(); n != 0 {
		t.Fatalf("%d scripts sent for waits that could never succeed", n)
	}
	if err := new(core.Limiter).Wait(ctx, "k", l); err == nil {
		t.Error("the zero Limiter waited without error")
	}
}

// TestWaitRedisError: a failed decision ends the wait with its error,
// after one try: WaitN does not retry on its own.
func TestWaitRedisError(t *testing.T) {
	t.Parallel()
	down := errors.New("connection refused")
	rdb := &scriptedRedis{err: down}
	lim := core.New(rdb)
	if err := lim.Wait(waitCtx(t), "k", core.PerSecond(10)); !errors.Is(err, down) {
		t.Fatalf("err %v, want the client's error", err)
	}
	if n := rdb.calls.Load(); n != 1 {
		t.Fatalf("%d tries, want 1", n)
	}

	// A real client to a port where nothing listens: the same.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close() // nothing listens there now
	closed := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1})
	defer closed.Close()
	if err := core.New(closed, patient).Wait(ctx, "k", core.PerSecond(10)); err == nil || ctx.Err() != nil {
		t.Fatalf("Wait against no Redis: err %v (context: %v), want a connection error before the deadline", err, ctx.Err())
	}
}

// zeroRetryDenial returns what l's script replies when it denies one
// event, with RetryAfter 0: the real script's reply on miniredis, so that
// it keeps the script's shape.
func zeroRetryDenial(t *testing.T, l core.Limit) []any {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	src, _, argv := core.Script(l)
	var reply []any
	for range l.Capacity() + 1 {
		var err error
		if reply, err = rdb.Eval(context.Background(), src, []string{"k"}, argv...).Slice(); err != nil {
			t.Fatal(err)
		}
	}
	// a decision's reply: the limit's allowed, remaining, reset_after,
	// next, retry_after, ... (internal/wire)
	if len(reply) < 5 || reply[0] != int64(0) || reply[4] == int64(0) {
		t.Fatalf("a denial replied %v; want {0, remaining, reset_after, next, retry_after > 0, ...}", reply)
	}
	reply[4] = int64(0)
	return reply
}

// TestWaitNeverSpins: a denial whose RetryAfter is 0 (and so never cached)
// makes WaitN pause at least a millisecond between tries.
func TestWaitNeverSpins(t *testing.T) {
	t.Parallel()
	l := core.PerSecond(10)
	rdb := &scriptedRedis{reply: zeroRetryDenial(t, l)}
	lim := core.New(rdb)
	// 300 ms: long enough for a second try on a starved machine.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := lim.Wait(ctx, "k", l)
	took := time.Since(began)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want context.DeadlineExceeded", err)
	}
	if tries, most := rdb.calls.Load(), int64(took/time.Millisecond)+1; tries > most || tries < 2 {
		t.Fatalf("%d tries in %v: want between 2 and %d (one per millisecond at most)", tries, took, most)
	}
}

// TestWaitSharedRate is the point of WaitN: several app instances (each its
// own Limiter and client) and several goroutines in each wait on one key;
// together they are admitted at the limit's rate, no more (GCRA: at most
// burst + rate x elapsed, on the server's clock), and every instance
// progresses.
func TestWaitSharedRate(t *testing.T) {
	t.Parallel()
	for _, b := range []struct {
		name string
		// start returns how to make a client and the node that holds
		// the key "{shared}", whose clock and counts the test reads.
		start func(t *testing.T) (newClient func() redis.UniversalClient, node *redis.Client)
	}{
		{"standalone", func(t *testing.T) (func() redis.UniversalClient, *redis.Client) {
			srv := redistest.Standalone(t)
			return func() redis.UniversalClient { return srv.Client(t) }, srv.Client(t)
		}},
		{"cluster", func(t *testing.T) (func() redis.UniversalClient, *redis.Client) {
			cl := redistest.NewCluster(t, 3)
			node, err := cl.Client(t).MasterForKey(context.Background(), "{shared}")
			if err != nil {
				t.Fatal(err)
			}
			return func() redis.UniversalClient { return cl.Client(t) }, node
		}},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			newClient, node := b.start(t)
			testSharedRate(t, newClient, node)
		})
	}
}

func testSharedRate(t *testing.T, newClient func() redis.UniversalClient, node *redis.Client) {
	const instances, goroutines, maxWaits = 4, 4, 10_000
	l := core.Limit{Rate: 20, Period: 200 * time.Millisecond} // 100/s, bursts of 20
	interval := l.Period / time.Duration(l.Rate)
	prefix := uniquePrefix()

	var (
		admitted [instances]atomic.Int64
		wg       sync.WaitGroup
		errs     = make(chan error, instances*goroutines)
	)
	bg := context.Background()
	decisions := func() float64 {
		stats, err := redistest.CommandStats(bg, node)
		if err != nil {
			t.Fatal(err)
		}
		return stats["evalsha"].Calls + stats["eval"].Calls
	}
	sentBefore := decisions()
	began, err := node.Time(bg).Result()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	for i := range instances {
		lim := core.New(newClient(), patient, core.WithPrefix(prefix))
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range maxWaits {
					err := lim.Wait(ctx, "shared", l)
					switch {
					case err == nil:
						admitted[i].Add(1)
					case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, core.ErrTimeout):
						return // the window is over
					default:
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	ended, err := node.Time(bg).Result()
	if err != nil {
		t.Fatal(err)
	}
	sent := decisions() - sentBefore
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	var total int64
	per := make([]int64, instances)
	for i := range admitted {
		per[i] = admitted[i].Load()
		total += per[i]
	}
	elapsed := ended.Sub(began)
	most := int64(l.Capacity()) + int64(elapsed/interval) + 1
	least := int64(elapsed/interval) / 2
	t.Logf("%d instances x %d goroutines, %v on the server's clock: %d admitted (per instance %v), at most %d allowed; %.0f decisions reached Redis",
		instances, goroutines, elapsed.Round(time.Millisecond), total, per, most, sent)
	if total > most {
		t.Fatalf("%d admitted in %v: above the limit's %d (burst %d + %v / %v)", total, elapsed, most, l.Capacity(), elapsed, interval)
	}
	if total < least {
		t.Fatalf("%d admitted in %v: below %d, half the rate: waiters do not progress", total, elapsed, least)
	}
	for i, n := range per {
		if n == 0 {
			t.Errorf("instance %d was never admitted", i)
		}
	}
}

// Workers in any number of processes share one rate towards a partner
// API: each waits for its turn before it calls.
func ExampleLimiter_Wait() {
	// An embedded Redis whose clock is the process's, as a real Redis's
	// is: waits take real time. Use a real Redis in production.
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	lim := core.New(rdb)
	ctx := context.Background()

	// 10 calls a second, at most 2 at once, for every worker together.
	limit := core.Limit{Rate: 10, Period: time.Second, Burst: 2}
	start := time.Now()
	for i := 0; i < 4; i++ {
		if err := lim.Wait(ctx, "partner-api", limit); err != nil {
			fmt.Println(err) // Redis failed, or ctx ended: give up or try later
			return
		}
		// call the partner API here
	}
	fmt.Println("4 calls; the 3rd and 4th waited their turns:", time.Since(start) >= 200*time.Millisecond)

	// A deadline before the next turn fails at once, not at the deadline.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	err = lim.Wait(short, "partner-api", limit)
	fmt.Println("deadline exceeded:", errors.Is(err, context.DeadlineExceeded))

	// A cost above the burst could never be admitted.
	err = lim.WaitN(ctx, "partner-api", limit, 3)
	fmt.Println(err)
	// Output:
	// 4 calls; the 3rd and 4th waited their turns: true
	// deadline exceeded: true
	// redlimit: invalid cost: WaitN(n=3) exceeds the burst 2 of 10/s burst=2: it can never be admitted
}
