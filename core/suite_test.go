package core_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
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

// The shared behaviour suite. Every algorithm runs every case on every
// backend. A new algorithm joins with one line in suiteAlgorithms.

// suiteAlgorithm is what the suite needs to know of one algorithm.
type suiteAlgorithm struct {
	name string
	// limit is the limit most cases use: hour-scale, so real Redis TTLs
	// never expire state while a fake clock stands still.
	limit core.Limit
	// refilled is how many single events pass a time d after the key was
	// drained in one go at a multiple of the period since t0, for d shorter
	// than the limit's ResetAfter.
	refilled func(l core.Limit, d time.Duration) int
}

var suiteAlgorithms = []suiteAlgorithm{
	{"gcra", core.Limit{Algorithm: core.GCRA, Rate: 10, Period: time.Hour, Burst: 15}, continuousRefill},
	{"token_bucket", core.Limit{Algorithm: core.TokenBucket, Rate: 10, Period: time.Hour, Burst: 15}, continuousRefill},
	{"token_bucket_stepped", core.Limit{Algorithm: core.TokenBucket, Rate: 10, Period: time.Hour, Burst: 15, Stepped: true}, steppedRefill},
	{"leaky_bucket", core.Limit{Algorithm: core.LeakyBucket, Rate: 10, Period: time.Hour, Burst: 15}, continuousRefill},
	{"leaky_bucket_shape", core.Limit{Algorithm: core.LeakyBucket, Rate: 10, Period: time.Hour, Burst: 15, Shape: true}, continuousRefill},
	{"fixed_window", core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: time.Hour}, windowRefill},
	{"sliding_window", core.Limit{Algorithm: core.SlidingWindow, Rate: 10, Period: time.Hour}, slidingRefill},
	{"sliding_log", core.Limit{Algorithm: core.SlidingLog, Rate: 10, Period: time.Hour}, windowRefill},
}

// continuousRefill: one event back every Period/Rate, up to the burst.
func continuousRefill(l core.Limit, d time.Duration) int {
	return min(l.Capacity(), int(d*time.Duration(l.Rate)/l.Period))
}

// windowRefill: nothing until the window that the drain opened has ended.
func windowRefill(l core.Limit, d time.Duration) int {
	if d >= l.Period {
		return l.Rate
	}
	return 0
}

// steppedRefill: Rate tokens at once at each full Period, up to the burst.
func steppedRefill(l core.Limit, d time.Duration) int {
	return min(l.Capacity(), int(d/l.Period)*l.Rate)
}

// slidingRefill: the drained sub-bucket counts whole for a period, then
// its weight falls over one sub-bucket.
func slidingRefill(l core.Limit, d time.Duration) int {
	size := l.Period / time.Duration(buckets(l))
	if d < l.Period {
		return 0
	}
	return min(l.Rate, int(time.Duration(l.Rate)*(d-l.Period)/size))
}

func buckets(l core.Limit) int {
	if l.Buckets == 0 {
		return core.DefaultBuckets
	}
	return l.Buckets
}

// world is one isolated place to run a case: its own key prefix, a clock the
// case controls, and a way to make independent clients.
type world struct {
	t         *testing.T
	prefix    string
	newClient func() redis.UniversalClient // a new pool, like another app instance
	admin     redis.UniversalClient
	opts      []core.Option
	advance   func(time.Duration)
	// ttlsFollowClock: advancing the clock also runs down key TTLs.
	ttlsFollowClock bool
	// paired: the suite's limiters decide every limit together with a
	// companion (see paired).
	paired bool
}

// patient is for tests of behaviour, not of timing: under -race, with
// every test running in parallel on two cores, a decision can take longer
// than the default timeout.
var patient = core.WithTimeout(10 * time.Second)

func (w *world) limiter() *core.Limiter {
	return core.New(w.newClient(), w.opts...)
}

// decider is what the suite's cases ask of a Limiter.
type decider interface {
	Allow(ctx context.Context, key string, l core.Limit) (core.Result, error)
	AllowN(ctx context.Context, key string, l core.Limit, n int) (core.Result, error)
	Reset(ctx context.Context, key string, l core.Limit) error
}

// decider returns a new Limiter for a suite case: alone, or paired.
func (w *world) decider(opts ...core.Option) decider {
	lim := core.New(w.newClient(), append(w.opts[:len(w.opts):len(w.opts)], opts...)...)
	if w.paired {
		return paired{lim}
	}
	return lim
}

// paired decides each limit together with a companion of another algorithm
// that never binds, in one decision (AllowAll's path, through DecideEach).
// Every case must then see exactly what the limit alone would give: a
// limit's state is the same decided alone or with others. The binding
// result must agree with the limit's own.
type paired struct{ lim *core.Limiter }

// companion never binds the suite's limits: a huge allowance per minute.
func companion(l core.Limit) core.Limit {
	if l.Algorithm == core.FixedWindow {
		return core.Limit{Algorithm: core.GCRA, Rate: 1_000_000, Period: time.Minute}
	}
	return core.Limit{Algorithm: core.FixedWindow, Rate: 1_000_000, Period: time.Minute}
}

func (p paired) Allow(ctx context.Context, key string, l core.Limit) (core.Result, error) {
	return p.AllowN(ctx, key, l, 1)
}

func (p paired) AllowN(ctx context.Context, key string, l core.Limit, n int) (core.Result, error) {
	var each [2]core.Result
	res, _, err := p.lim.DecideEach(ctx, key, nil, []core.Limit{companion(l), l}, n, each[:])
	if err != nil {
		return res, err
	}
	own := each[1]
	if res.Limit != l || res.Allowed != own.Allowed || res.Remaining != own.Remaining || res.RetryAfter != own.RetryAfter {
		return own, fmt.Errorf("the binding result %+v is not the limit's own %+v", res, own)
	}
	return own, nil
}

func (p paired) Reset(ctx context.Context, key string, l core.Limit) error {
	return p.lim.Reset(ctx, key, l)
}

// stateKey is the documented layout <prefix>{<key>}:<algorithm>:<period>,
// with ":stepped" after a stepped token bucket's algorithm and the period
// written with its count ("1s", "10s", "500ms").
func stateKey(prefix, id string, l core.Limit) string {
	key := prefix + "{" + id + "}:" + string(l.Algorithm)
	if l.Stepped {
		key += ":stepped"
	}
	period := strings.TrimPrefix(core.Limit{Rate: 1, Period: l.Period}.String(), "1/")
	if period[0] < '0' || period[0] > '9' {
		period = "1" + period
	}
	if l.Unit != "" {
		period += ":" + l.Unit
	}
	return key + ":" + period
}

func (w *world) flushScripts() {
	ctx := context.Background()
	if cc, ok := w.admin.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.ScriptFlush(ctx).Err()
		})
		if err != nil {
			w.t.Fatal(err)
		}
		return
	}
	if err := w.admin.ScriptFlush(ctx).Err(); err != nil {
		w.t.Fatal(err)
	}
}

// fakeClock is a client clock for core.WithClock that only moves when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

var prefixSeq atomic.Int64

func uniquePrefix() string { return fmt.Sprintf("test%d:", prefixSeq.Add(1)) }

// backend makes worlds. start runs once per backend (starting servers);
// the function it returns makes one world per case.
type backend struct {
	name  string
	start func(t *testing.T) func(t *testing.T) *world
}

var backends = []backend{
	{"miniredis", func(*testing.T) func(*testing.T) *world { return miniredisWorld }},
	{"standalone", func(t *testing.T) func(*testing.T) *world {
		srv := redistest.Standalone(t)
		return func(t *testing.T) *world {
			return realWorld(t, func() redis.UniversalClient { return srv.Client(t) })
		}
	}},
	// A client whose commands go-redis bounds by their context's deadline:
	// an idle Limiter sends its decisions from the caller's goroutine.
	{"standalone-direct", func(t *testing.T) func(*testing.T) *world {
		srv := redistest.Standalone(t)
		return func(t *testing.T) *world {
			return realWorld(t, func() redis.UniversalClient {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = c.Close() })
				return c
			})
		}
	}},
	{"cluster", func(t *testing.T) func(*testing.T) *world {
		cl := redistest.NewCluster(t, 3)
		return func(t *testing.T) *world {
			return realWorld(t, func() redis.UniversalClient { return cl.Client(t) })
		}
	}},
	{"sentinel", func(t *testing.T) func(*testing.T) *world {
		s := redistest.NewSentinel(t)
		return func(t *testing.T) *world {
			return realWorld(t, func() redis.UniversalClient { return s.Client(t) })
		}
	}},
}

// miniredisWorld: a server of its own whose clock (TIME, and key TTLs) the
// case moves; the limiter reads time from the server as in production.
func miniredisWorld(t *testing.T) *world {
	m := miniredis.RunT(t)
	m.SetTime(t0)
	m.ClockTTL(true)
	now := t0
	var mu sync.Mutex
	newClient := func() redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	prefix := uniquePrefix()
	return &world{
		t: t, prefix: prefix, newClient: newClient, admin: newClient(),
		// The deny cache runs on the process's clock; here only the
		// server's moves, so the cache is told to follow it.
		opts: []core.Option{patient, core.WithPrefix(prefix), core.WithLocalClock(func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		})},
		advance: func(d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			now = now.Add(d)
			m.SetTime(now)
		},
		ttlsFollowClock: true,
	}
}

// realWorld: a shared real server, a unique prefix, and a fake client
// clock so cases are deterministic.
func realWorld(t *testing.T, newClient func() redis.UniversalClient) *world {
	clock := &fakeClock{now: t0}
	prefix := uniquePrefix()
	return &world{
		t: t, prefix: prefix, newClient: newClient, admin: newClient(),
		opts:    []core.Option{patient, core.WithPrefix(prefix), core.WithClock(clock.Now)},
		advance: clock.Advance,
	}
}

// suiteCases are run for every algorithm on every backend.
var suiteCases = []struct {
	name string
	run  func(t *testing.T, w *world, a suiteAlgorithm)
}{
	{"CountdownAndDeny", testCountdownAndDeny},
	{"RetryAfterPromise", testRetryAfterPromise},
	{"NextAfterPromise", testNextAfterPromise},
	{"Refill", testRefill},
	{"ResetAfter", testResetAfter},
	{"TTL", testTTL},
	{"Cost", testCost},
	{"CostAboveBurst", testCostAboveBurst},
	{"InvalidInput", testInvalidInput},
	{"ScriptFlush", testScriptFlush},
	{"Reset", testReset},
	{"KeysStayApart", testKeysStayApart},
	{"LimitChange", testLimitChange},
	{"ConcurrentExact", testConcurrentExact},
}

func TestBehaviour(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			newWorld := b.start(t)
			for _, a := range suiteAlgorithms {
				for _, mode := range []string{"alone", "paired"} {
					t.Run(a.name+"/"+mode, func(t *testing.T) {
						t.Parallel()
						for _, c := range suiteCases {
							t.Run(c.name, func(t *testing.T) {
								t.Parallel()
								w := newWorld(t)
								w.paired = mode == "paired"
								c.run(t, w, a)
							})
						}
					})
				}
			}
		})
	}
}

// allowN runs one decision and fails the test on error.
func allowN(t *testing.T, lim decider, key string, l core.Limit, n int) core.Result {
	t.Helper()
	res, err := lim.AllowN(context.Background(), key, l, n)
	if err != nil {
		t.Fatalf("AllowN(%q, %v, %d): %v", key, l, n, err)
	}
	return res
}

// check compares the parts of a result that a case pins down.
func check(t *testing.T, what string, res core.Result, allowed bool, remaining int) {
	t.Helper()
	if res.Allowed != allowed || res.Remaining != remaining {
		t.Fatalf("%s: got allowed=%v remaining=%d, want allowed=%v remaining=%d (result %+v)",
			what, res.Allowed, res.Remaining, allowed, remaining, res)
	}
	if res.Allowed && res.RetryAfter != 0 {
		t.Fatalf("%s: allowed with RetryAfter %v, want 0", what, res.RetryAfter)
	}
	if !res.Allowed && res.RetryAfter <= 0 {
		t.Fatalf("%s: denied with RetryAfter %v, want > 0", what, res.RetryAfter)
	}
	if res.Delay != 0 && (!res.Allowed || !res.Limit.Shape) {
		t.Fatalf("%s: Delay %v, want 0 unless a shaping limit admits (result %+v)", what, res.Delay, res)
	}
}

// drain takes the whole burst at once and checks that it was all there.
func drain(t *testing.T, lim decider, key string, l core.Limit) core.Result {
	t.Helper()
	res := allowN(t, lim, key, l, l.Capacity())
	check(t, "drain", res, true, 0)
	return res
}

func testCountdownAndDeny(t *testing.T, w *world, a suiteAlgorithm) {
	lim, l, b := w.decider(), a.limit, a.limit.Capacity()
	for i := 1; i <= b; i++ {
		res := allowN(t, lim, "k", l, 1)
		check(t, fmt.Sprintf("request %d", i), res, true, b-i)
		if res.ResetAfter <= 0 {
			t.Fatalf("request %d: ResetAfter %v, want > 0 once something is used", i, res.ResetAfter)
		}
		if res.Limit != l {
			t.Fatalf("Result.Limit = %v, want %v", res.Limit, l)
		}
	}
	for i := 0; i < 3; i++ {
		check(t, "over the limit", allowN(t, lim, "k", l, 1), false, 0)
	}
}

func testRetryAfterPromise(t *testing.T, w *world, a suiteAlgorithm) {
	lim, l := w.decider(), a.limit
	for _, cost := range []int{1, 3} {
		key := fmt.Sprintf("cost%d", cost)
		drain(t, lim, key, l)
		denied := allowN(t, lim, key, l, cost)
		check(t, "after drain", denied, false, 0)
		// One microsecond early is still too early: RetryAfter is not padded.
		w.advance(denied.RetryAfter - time.Microsecond)
		if res := allowN(t, lim, key, l, cost); res.Allowed {
			t.Fatalf("cost %d: allowed %v before RetryAfter %v ended", cost, time.Microsecond, denied.RetryAfter)
		}
		w.advance(time.Microsecond)
		if res := allowN(t, lim, key, l, cost); !res.Allowed {
			t.Fatalf("cost %d: denied right after RetryAfter %v: %+v", cost, denied.RetryAfter, res)
		}
	}
}

// testNextAfterPromise: NextAfter is 0 on a full key; else one microsecond
// before it Remaining has not grown, and at it, it has. A denial's
// NextAfter is no later than its RetryAfter (equal for a cost of 1).
func testNextAfterPromise(t *testing.T, w *world, a suiteAlgorithm) {
	lim, l := w.decider(), a.limit
	if res := allowN(t, lim, "k", l, 0); res.NextAfter != 0 {
		t.Fatalf("a full key: NextAfter %v, want 0", res.NextAfter)
	}
	used := allowN(t, lim, "k", l, 3)
	if used.NextAfter <= 0 || used.NextAfter > used.ResetAfter {
		t.Fatalf("3 used: NextAfter %v, want in (0, ResetAfter %v]", used.NextAfter, used.ResetAfter)
	}
	w.advance(used.NextAfter - time.Microsecond)
	if res := allowN(t, lim, "k", l, 0); res.Remaining != used.Remaining {
		t.Fatalf("%v before NextAfter %v: Remaining %d, want still %d", time.Microsecond, used.NextAfter, res.Remaining, used.Remaining)
	}
	w.advance(time.Microsecond)
	if res := allowN(t, lim, "k", l, 0); res.Remaining <= used.Remaining {
		t.Fatalf("at NextAfter %v: Remaining %d, want more than %d", used.NextAfter, res.Remaining, used.Remaining)
	}

	drain(t, lim, "j", l)
	for _, cost := range []int{1, 3} {
		res := allowN(t, lim, "j", l, cost)
		switch {
		case res.Allowed || res.NextAfter <= 0 || res.NextAfter > res.RetryAfter:
			t.Fatalf("denied at cost %d: %+v, want 0 < NextAfter <= RetryAfter", cost, res)
		case cost == 1 && res.NextAfter != res.RetryAfter:
			t.Fatalf("denied at cost 1: NextAfter %v, RetryAfter %v: want them equal", res.NextAfter, res.RetryAfter)
		}
	}
}

func testRefill(t *testing.T, w *world, a suiteAlgorithm) {
	lim, l := w.decider(), a.limit
	step := l.Period / time.Duration(l.Rate)
	var elapsed time.Duration
	for i, d := range []time.Duration{step / 2, step, 5*step/2 + 1, 7 * step, l.Period - time.Microsecond} {
		// Drain at a multiple of the period since t0: the start of a
		// sub-bucket, for the sliding window.
		if off := elapsed % l.Period; off != 0 {
			w.advance(l.Period - off)
			elapsed += l.Period - off
		}
		key := fmt.Sprintf("refill%d", i)
		drain(t, lim, key, l)
		w.advance(d)
		elapsed += d
		want := a.refilled(l, d)
		if got := allowN(t, lim, key, l, 0); got.Remaining != want {
			t.Fatalf("%v after draining: Remaining %d, want %d", d, got.Remaining, want)
		}
		for j := 1; j <= want; j++ {
			check(t, fmt.Sprintf("%v after draining, request %d", d, j), allowN(t, lim, key, l, 1), true, want-j)
		}
		check(t, fmt.Sprintf("%v after draining, one more", d), allowN(t, lim, key, l, 1), false, 0)
	}
}

func testResetAfter(t *testing.T, w *world, a suiteAlgorithm) {
	lim, l, b := w.decider(), a.limit, a.limit.Capacity()
	for _, used := range []int{1, b} {
		key := fmt.Sprintf("used%d", used)
		res := allowN(t, lim, key, l, used)
		w.advance(res.ResetAfter - time.Microsecond)
		if got := allowN(t, lim, key, l, 0); got.Remaining == b {
			t.Fatalf("used %d: full allowance before ResetAfter %v ended", used, res.ResetAfter)
		}
		w.advance(time.Microsecond)
		got := allowN(t, lim, key, l, 0)
		if got.Remaining != b || got.ResetAfter != 0 {
			t.Fatalf("used %d: after ResetAfter %v: Remaining %d ResetAfter %v, want %d and 0",
				used, res.ResetAfter, got.Remaining, got.ResetAfter, b)
		}
	}
}

func testTTL(t *testing.T, w *world, a suiteAlgorithm) {
	ctx := context.Background()
	lim, l := w.decider(), a.limit
	key := stateKey(w.prefix, "k", l)

	// Reporting the state of an unknown key writes nothing.
	allowN(t, lim, "k", l, 0)
	if n := w.admin.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("a peek (n=0) created %s", key)
	}
	res := allowN(t, lim, "k", l, 1)
	ttl, err := w.admin.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if limit := res.ResetAfter.Round(time.Millisecond) + time.Millisecond; ttl <= 0 || ttl > limit {
		t.Fatalf("TTL of %s is %v, want in (0, %v] (ResetAfter %v)", key, ttl, limit, res.ResetAfter)
	}
	if !w.ttlsFollowClock {
		return
	}
	w.advance(res.ResetAfter + time.Millisecond)
	if n := w.admin.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("%s still exists %v after ResetAfter %v", key, time.Millisecond, res.ResetAfter)
	}
	check(t, "first request after expiry", allowN(t, lim, "k", l, 1), true, l.Capacity()-1)
}

func testCost(t *testing.T, w *world, a suiteAlgorithm) {
	lim, l, b := w.decider(), a.limit, a.limit.Capacity()
	check(t, "cost 3", allowN(t, lim, "k", l, 3), true, b-3)
	for i := 0; i < 2; i++ {
		check(t, "peek", allowN(t, lim, "k", l, 0), true, b-3)
	}
	check(t, "down to 2", allowN(t, lim, "k", l, b-5), true, 2)
	// All or nothing: 3 do not fit in 2, and the 2 stay.
	check(t, "cost 3 with 2 left", allowN(t, lim, "k", l, 3), false, 2)
	check(t, "cost 2 with 2 left", allowN(t, lim, "k", l, 2), true, 0)
	check(t, "peek when empty", allowN(t, lim, "k", l, 0), true, 0)
}

func testCostAboveBurst(t *testing.T, w *world, a suiteAlgorithm) {
	lim, l, b := w.decider(), a.limit, a.limit.Capacity()
	for i := 0; i < 2; i++ {
		res := allowN(t, lim, "k", l, b+1)
		if res.Allowed || res.RetryAfter != core.InfDuration || res.Remaining != b {
			t.Fatalf("cost %d above burst %d: got %+v, want denied, RetryAfter InfDuration, Remaining %d", b+1, b, res, b)
		}
	}
	if n := w.admin.Exists(context.Background(), stateKey(w.prefix, "k", l)).Val(); n != 0 {
		t.Fatal("a cost above the burst wrote state")
	}
	check(t, "whole burst afterwards", allowN(t, lim, "k", l, b), true, 0)
}

func testInvalidInput(t *testing.T, w *world, a suiteAlgorithm) {
	ctx := context.Background()
	lim, l := w.decider(), a.limit
	bad := []core.Limit{
		{Algorithm: l.Algorithm, Rate: 0, Period: time.Second},
		{Algorithm: l.Algorithm, Rate: -1, Period: time.Second},
		{Algorithm: l.Algorithm, Rate: 1, Period: 0},
		{Algorithm: l.Algorithm, Rate: 1, Period: -time.Second},
		{Algorithm: l.Algorithm, Rate: 1, Period: time.Second, Burst: -1},
		{Algorithm: l.Algorithm + "x", Rate: 1, Period: time.Second},
	}
	for _, bl := range bad {
		if _, err := lim.Allow(ctx, "k", bl); !errors.Is(err, core.ErrInvalidLimit) {
			t.Errorf("Allow with %+v: err %v, want ErrInvalidLimit", bl, err)
		}
		if err := lim.Reset(ctx, "k", bl); !errors.Is(err, core.ErrInvalidLimit) {
			t.Errorf("Reset with %+v: err %v, want ErrInvalidLimit", bl, err)
		}
	}
	if _, err := lim.AllowN(ctx, "k", l, -1); !errors.Is(err, core.ErrInvalidCost) {
		t.Errorf("AllowN(n=-1): err %v, want ErrInvalidCost", err)
	}
	for _, key := range []string{"", strings.Repeat("x", core.MaxKeyLen+1)} {
		if _, err := lim.Allow(ctx, key, l); !errors.Is(err, core.ErrInvalidKey) {
			t.Errorf("Allow with a %d-byte key: err %v, want ErrInvalidKey", len(key), err)
		}
	}
	// Nothing was written by any of it.
	if cnt := countKeys(t, w); cnt != 0 {
		t.Errorf("invalid input wrote %d keys", cnt)
	}
	check(t, "longest key", allowN(t, lim, strings.Repeat("x", core.MaxKeyLen), l, 1), true, l.Capacity()-1)
}

// countKeys counts the keys under the world's prefix on every node.
func countKeys(t *testing.T, w *world) int {
	ctx := context.Background()
	var n atomic.Int64
	count := func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, w.prefix+"*").Result()
		n.Add(int64(len(keys)))
		return err
	}
	var err error
	if cc, ok := w.admin.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, count)
	} else {
		err = count(ctx, w.admin.(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
	return int(n.Load())
}

func testScriptFlush(t *testing.T, w *world, a suiteAlgorithm) {
	lim, l, b := w.decider(), a.limit, a.limit.Capacity()
	check(t, "before flush", allowN(t, lim, "k", l, 1), true, b-1)
	w.flushScripts()
	check(t, "after SCRIPT FLUSH", allowN(t, lim, "k", l, 1), true, b-2)
	check(t, "once reloaded", allowN(t, lim, "k", l, 1), true, b-3)
}

func testReset(t *testing.T, w *world, a suiteAlgorithm) {
	ctx := context.Background()
	lim, l, b := w.decider(), a.limit, a.limit.Capacity()
	if err := lim.Reset(ctx, "k", l); err != nil {
		t.Fatalf("Reset of an unknown key: %v", err)
	}
	drain(t, lim, "k", l)
	drain(t, lim, "other", l)
	if err := lim.Reset(ctx, "k", l); err != nil {
		t.Fatal(err)
	}
	check(t, "after Reset", allowN(t, lim, "k", l, 1), true, b-1)
	check(t, "another key is untouched", allowN(t, lim, "other", l, 1), false, 0)
}

func testKeysStayApart(t *testing.T, w *world, a suiteAlgorithm) {
	lim, l, b := w.decider(), a.limit, a.limit.Capacity()
	// Keys that would collide or break the hash tag if not escaped.
	tricky := []string{"a}b", "a%7Db", "}", "{", "{x}", "%", "%25", "user:1", "ユーザー"}
	for _, k := range tricky {
		drain(t, lim, k, l)
	}
	for _, k := range tricky {
		check(t, "drained "+k, allowN(t, lim, k, l, 0), true, 0)
	}
	// Many identities spread over every cluster slot range.
	for i := 0; i < 50; i++ {
		check(t, "fresh identity", allowN(t, lim, fmt.Sprintf("id%d", i), l, 1), true, b-1)
	}
	// Another prefix is another namespace.
	other := w.decider(core.WithPrefix(w.prefix + "other:"))
	check(t, "other prefix", allowN(t, other, "a}b", l, 1), true, b-1)
}

// testLimitChange: Rate and Burst are not part of the key, so a limit
// changed at run time keeps the state: what the drain used under the
// old limit is still used under a doubled one.
func testLimitChange(t *testing.T, w *world, a suiteAlgorithm) {
	lim, l := w.decider(), a.limit
	drain(t, lim, "k", l)
	bigger := l
	bigger.Rate *= 2
	if bigger.Burst != 0 {
		bigger.Burst *= 2
	}
	res := allowN(t, lim, "k", bigger, 0)
	if limit := bigger.Capacity() - l.Capacity(); res.Remaining > limit {
		t.Fatalf("after draining %v, %v has Remaining %d, want at most %d: the state was lost",
			l, bigger, res.Remaining, limit)
	}
}

// testConcurrentExact: several app instances, each with its own client and
// several goroutines, hammer one key; exactly the burst gets through, and
// every Remaining value from burst-1 down to 0 is handed out exactly once.
func testConcurrentExact(t *testing.T, w *world, a suiteAlgorithm) {
	const instances, goroutines = 4, 8
	l := core.Limit{Algorithm: a.limit.Algorithm, Rate: 100, Period: time.Hour}
	attempts := 3 * l.Rate
	deadline := time.Now().Add(30 * time.Second)

	var (
		tried     atomic.Int64
		mu        sync.Mutex
		remaining []int
		wg        sync.WaitGroup
		errs      = make(chan error, instances*goroutines)
	)
	for i := 0; i < instances; i++ {
		lim := w.decider()
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for tried.Add(1) <= int64(attempts) && time.Now().Before(deadline) {
					res, err := lim.Allow(context.Background(), "hot", l)
					if err != nil {
						errs <- err
						return
					}
					if res.Allowed {
						mu.Lock()
						remaining = append(remaining, res.Remaining)
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if tried.Load() < int64(attempts) {
		t.Fatalf("only %d of %d attempts ran before the deadline", tried.Load(), attempts)
	}
	if len(remaining) != l.Rate {
		t.Fatalf("%d instances x %d goroutines, %d attempts: %d allowed, want exactly %d",
			instances, goroutines, attempts, len(remaining), l.Rate)
	}
	sort.Ints(remaining)
	for i, r := range remaining {
		if r != i {
			t.Fatalf("Remaining values handed out: %v, want each of 0..%d once", remaining, l.Rate-1)
		}
	}
}
