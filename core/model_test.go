package core_test

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// The model check: "exact" proven over random traffic, not argued.
//
// Several Limiters (each core.New on a go-redis client of its own, as app
// instances would be) share one Redis and one fake clock (WithClock) and
// take random operations on one key: AllowN of 0 to the burst and above,
// AllowN through Prefetch (answered from the lease; give-backs when a
// decision needs more than the lease holds), AllowAll and Reserve of two
// limits, Reserve with a Concurrency limit, Settle of a random outstanding
// reservation (not FIFO) at a cost below n (a refund, often 0), equal to
// it or above it (a debt), Release, and steps of the clock (0, 1 µs,
// fractions of the emission interval, whole periods). After every
// admission, the log of admissions is replayed through an exact model of
// each limit without prefetch, and the new admission must fit:
//
//   - a reservation counts its events at the instant it was made, at its
//     current final cost: a refund lowers it retroactively (the refunded
//     events are treated as never admitted: the most lenient history the
//     docs allow, "never lets more through than the same requests would
//     have without it"); a charge above n adds cost-n forced events at the
//     instant of the settlement, which are not checked (a debt);
//   - prefetched events are not admissions: only what a decision admitted
//     is logged, whether answered from the lease or by Redis.
//
// The implementation may refund less than asked (a late refund, a window
// that has passed): the model is then more lenient than it, and the check
// flags only over-admission. The models:
//
//   - gcra, token_bucket, leaky_bucket (policing and shape): one
//     continuous bucket of capacity burst·Period that drains Rate a µs, in
//     exact integers (an event is Period units); c events fit at t if the
//     backlog at t plus c·Period is at most burst·Period. GCRA's interval
//     is Period/Rate rounded up, so it admits no more; shape's MaxDelay
//     only makes it stricter.
//   - token_bucket stepped: Rate tokens at once at every step boundary,
//     at most burst held; the boundaries are the real ones: the anchor
//     (field t of the state hash, read after every operation on it) plus
//     whole periods; a new anchor (the key was deleted when full, and
//     created again) starts a new series of boundaries.
//   - fixed_window: the admissions, net of refunds, of each real window
//     (field w of the state hash, read after every operation on it) are at
//     most Rate; charges count in the window of their settlement.
//   - sliding_window: the algorithm's own weighted estimate, exact at
//     sub-bucket granularity: at t, the k sub-buckets up to t's count
//     whole and the one before is weighted by the part of it still inside
//     the window; admitted c fit if that, plus c, is at most Rate
//     (docs/algorithms.md; it implies the span guarantees of its table).
//   - sliding_log: no span (t-Period, t] holds more than Rate.
//   - concurrency: the slots held at t (taken, not settled or released,
//     lease not ended) are at most Rate.
//
// Each Result must also keep the plain invariants: never Allowed for more
// than the capacity, Remaining never above the capacity.
//
// A failing run prints its seed and the shortest trace found by replaying
// shorter operation lists on miniredis. -model.seed (REDLIMIT_MODEL_SEED)
// replays a run; -model.ops (REDLIMIT_MODEL_OPS) runs longer
// (docs/testing.md).

var (
	modelOpsFlag  = flag.Int("model.ops", 0, "operations per TestModel run (0: the default, or $REDLIMIT_MODEL_OPS)")
	modelSeedFlag = flag.Uint64("model.seed", 0, "seed of TestModel (0: derived from the time, or $REDLIMIT_MODEL_SEED)")
)

// modelSettings returns the operations per run on miniredis, the seed, and
// whether the run is the long one.
func modelSettings(t *testing.T) (ops int, seed uint64, long bool) {
	ops = *modelOpsFlag
	if ops == 0 {
		if v, err := strconv.Atoi(os.Getenv("REDLIMIT_MODEL_OPS")); err == nil && v > 0 {
			ops = v
		}
	}
	long = ops > 0
	if !long {
		ops = 6000
	}
	seed = *modelSeedFlag
	if seed == 0 {
		if v, err := strconv.ParseUint(os.Getenv("REDLIMIT_MODEL_SEED"), 10, 64); err == nil {
			seed = v
		}
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	return ops, seed, long
}

// modelCase is one run's limits on the key.
type modelCase struct {
	name      string
	primary   core.Limit // decided alone (AllowN, Reserve) and with companion
	prefetch  int        // > 0: also decided with this Prefetch (same state)
	companion core.Limit // of another algorithm, decided with primary
	conc      core.Limit // a Concurrency limit, reserved with primary
	reserving bool       // primary is a Concurrency limit: Reserve only
}

const modelPeriod = time.Second

var modelConc = core.Limit{Algorithm: core.Concurrency, Rate: 3, Period: modelPeriod}

var modelCases = []modelCase{
	{name: "gcra", primary: core.Limit{Algorithm: core.GCRA, Rate: 10, Period: modelPeriod, Burst: 10}, prefetch: 4,
		companion: core.Limit{Algorithm: core.SlidingLog, Rate: 25, Period: 3 * modelPeriod}, conc: modelConc},
	{name: "token_bucket", primary: core.Limit{Algorithm: core.TokenBucket, Rate: 10, Period: modelPeriod, Burst: 15}, prefetch: 5,
		companion: core.Limit{Algorithm: core.FixedWindow, Rate: 30, Period: 3 * modelPeriod}, conc: modelConc},
	{name: "token_bucket_stepped", primary: core.Limit{Algorithm: core.TokenBucket, Rate: 2, Period: 200 * time.Millisecond, Burst: 10, Stepped: true},
		companion: core.Limit{Algorithm: core.SlidingLog, Rate: 25, Period: 3 * modelPeriod}, conc: modelConc},
	{name: "leaky_bucket", primary: core.Limit{Algorithm: core.LeakyBucket, Rate: 10, Period: modelPeriod, Burst: 10},
		companion: core.Limit{Algorithm: core.SlidingLog, Rate: 25, Period: 3 * modelPeriod}, conc: modelConc},
	{name: "leaky_bucket_shape", primary: core.Limit{Algorithm: core.LeakyBucket, Rate: 10, Period: modelPeriod, Burst: 10, Shape: true, MaxDelay: 700 * time.Millisecond},
		companion: core.Limit{Algorithm: core.GCRA, Rate: 25, Period: 3 * modelPeriod, Burst: 15}, conc: modelConc},
	{name: "fixed_window", primary: core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: modelPeriod}, prefetch: 4,
		companion: core.Limit{Algorithm: core.GCRA, Rate: 25, Period: 3 * modelPeriod, Burst: 15}, conc: modelConc},
	{name: "sliding_window", primary: core.Limit{Algorithm: core.SlidingWindow, Rate: 10, Period: modelPeriod, Buckets: 5},
		companion: core.Limit{Algorithm: core.GCRA, Rate: 25, Period: 3 * modelPeriod, Burst: 15}, conc: modelConc},
	{name: "sliding_log", primary: core.Limit{Algorithm: core.SlidingLog, Rate: 10, Period: modelPeriod},
		companion: core.Limit{Algorithm: core.GCRA, Rate: 25, Period: 3 * modelPeriod, Burst: 15}, conc: modelConc},
	{name: "concurrency", primary: modelConc, reserving: true,
		companion: core.Limit{Algorithm: core.GCRA, Rate: 10, Period: modelPeriod, Burst: 10}},
}

// TestModel runs modelCases on miniredis and on a real redis-server with a
// fake clock, and a few on the Redis clock in real time.
func TestModel(t *testing.T) {
	t.Parallel()
	ops, seed, long := modelSettings(t)
	t.Logf("seed %d (replay: -model.seed=%d), %d operations per run on miniredis", seed, seed, ops)
	budget := 4 * time.Second
	if long {
		budget = 30 * time.Minute
		if d, ok := t.Deadline(); ok {
			budget = time.Until(d) - time.Minute
		}
	}
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		for _, mc := range modelCases {
			t.Run(mc.name, func(t *testing.T) {
				t.Parallel()
				modelRun(t, mc, miniredisEnv, ops, seed, budget)
			})
		}
	})
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Standalone(t)
		env := func(t testing.TB) *menv { return standaloneEnv(t, srv.Addr, true) }
		for _, mc := range modelCases {
			t.Run(mc.name, func(t *testing.T) {
				t.Parallel()
				modelRun(t, mc, env, ops, seed, budget*3/4)
			})
		}
	})
	// A clock before 1970 (WithClock may give one): every time in every
	// state below 0, and Lua's floored % and string forms meet them.
	t.Run("before-1970", func(t *testing.T) {
		t.Parallel()
		env := miniredisEnvAt(modelT0Before1970)
		for _, mc := range modelCases {
			t.Run(mc.name, func(t *testing.T) {
				t.Parallel()
				modelRun(t, mc, env, ops/3, seed, budget/2)
			})
		}
	})
	t.Run("redis-clock", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Standalone(t)
		env := func(t testing.TB) *menv { return standaloneEnv(t, srv.Addr, false) }
		p := 300 * time.Millisecond
		for _, mc := range []modelCase{
			{name: "gcra", primary: core.Limit{Algorithm: core.GCRA, Rate: 10, Period: p, Burst: 10}, prefetch: 4,
				companion: core.Limit{Algorithm: core.SlidingLog, Rate: 20, Period: 2 * p},
				conc:      core.Limit{Algorithm: core.Concurrency, Rate: 3, Period: p}},
			{name: "fixed_window", primary: core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: p}, prefetch: 4,
				companion: core.Limit{Algorithm: core.GCRA, Rate: 20, Period: 2 * p, Burst: 15}},
		} {
			t.Run(mc.name, func(t *testing.T) {
				t.Parallel()
				n := 250
				if long {
					n = max(n, ops/20)
				}
				modelRun(t, mc, env, n, seed, min(budget, 3*time.Second)+time.Duration(n/250)*time.Second)
			})
		}
	})
}

// modelRun runs mc for up to n operations (within budget), and on a
// failure reports the seed and the shortest trace found.
func modelRun(t *testing.T, mc modelCase, newEnv func(testing.TB) *menv, n int, seed uint64, budget time.Duration) {
	h := fnv.New64a()
	h.Write([]byte(strings.TrimPrefix(t.Name(), "TestModel/"))) // one stream per backend and case
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	env := newEnv(t)
	ops := genOps(rng, mc, n, env.fake == nil)
	start := time.Now()
	r := runOps(env, mc, ops, start.Add(budget))
	t.Logf("%d of %d operations in %v: %d admissions (%d answered in process), %d reservations, %d refunds, %d charges",
		r.done, len(ops), time.Since(start).Round(time.Millisecond), r.admitted, r.local, r.reserved, r.refunds, r.charges)
	if r.fail == "" {
		if r.err != nil {
			t.Fatalf("seed %d: op %d: %v", seed, r.failAt, r.err)
		}
		return
	}
	trace := r.trace
	where := "this run"
	if env.fake != nil { // shorten it, replaying on miniredis
		short, sr, replays := shrink(mc, ops[:r.failAt+1], 10*time.Second)
		if sr.fail != "" {
			trace, where = sr.trace, fmt.Sprintf("replayed on miniredis, shortened from %d to %d operations in %d replays", r.failAt+1, len(short), replays)
		}
	}
	const most = 120
	if len(trace) > most {
		trace = append([]string{fmt.Sprintf("... (%d operations before)", len(trace)-most)}, trace[len(trace)-most:]...)
	}
	t.Errorf("seed %d (replay: go test ./core -run 'TestModel/%s' -model.seed=%d): operation %d: %s\ntrace (%s):\n  %s",
		seed, strings.ReplaceAll(t.Name(), "TestModel/", ""), seed, r.failAt, r.fail, where, strings.Join(trace, "\n  "))
}

// shrink looks for a shorter list of operations that still fails on
// miniredis: it drops chunks, halving their size, while the time lasts.
func shrink(mc modelCase, ops []mop, budget time.Duration) ([]mop, modelResult, int) {
	deadline := time.Now().Add(budget)
	replay := func(ops []mop) modelResult {
		env := miniredisEnv(nil)
		defer env.close()
		return runOps(env, mc, ops, deadline.Add(10*time.Second))
	}
	best := replay(ops)
	replays := 1
	if best.fail == "" {
		return ops, best, replays
	}
	ops = ops[:best.failAt+1]
	for chunk := len(ops) / 2; chunk >= 1; chunk /= 2 {
		for i := 0; i+chunk <= len(ops) && time.Now().Before(deadline) && replays < 3000; {
			cand := append(append([]mop(nil), ops[:i]...), ops[i+chunk:]...)
			replays++
			if r := replay(cand); r.fail != "" {
				ops, best = cand[:r.failAt+1], r
				continue
			}
			i += chunk
		}
	}
	return ops, best, replays
}

// ---- operations ----

type opKind int

const (
	opAdvance       opKind = iota
	opAllow                // AllowN of primary
	opAllowPrefetch        // AllowN of primary with Prefetch
	opAllowAll             // AllowAll of primary (or its prefetch variant) and companion
	opReserve              // Reserve of primary
	opReserve2             // Reserve of primary and companion
	opReserveConc          // Reserve of primary and conc
	opSettle               // Settle a random outstanding reservation
	opRelease              // Release a random outstanding reservation
	opDrain                // AllowN of 1 (primary, or its prefetch variant) until denied
)

// mop is one operation, drawn before the run: what it does does not depend
// on earlier answers, so that a shorter list can be replayed.
type mop struct {
	kind opKind
	lim  int
	n    int
	d    time.Duration // opAdvance
	pick int           // opSettle, opRelease: which outstanding reservation
	cost int           // opSettle: 0: zero, 1: below n, 2: n, 3: above n
	r    int           // opSettle: random for the cost
}

const modelLimiters = 3

func genOps(rng *rand.Rand, mc modelCase, count int, realClock bool) []mop {
	l := mc.primary
	c := l.Capacity()
	interval := l.Period / time.Duration(l.Rate)
	ops := make([]mop, 0, count)
	for len(ops) < count {
		if !mc.reserving && rng.IntN(12) == 0 { // a cluster: reservations, then refunds in random order between drains
			lim := rng.IntN(modelLimiters)
			k := 2 + rng.IntN(3)
			if rng.IntN(2) == 0 { // from a full bucket
				ops = append(ops, mop{kind: opAdvance, d: l.Period * time.Duration((c+l.Rate-1)/l.Rate)})
			}
			for j := 0; j < k; j++ {
				ops = append(ops, mop{kind: opReserve, lim: lim, n: 1 + rng.IntN(c/2)})
			}
			for j := 0; j < k; j++ {
				ops = append(ops, mop{kind: opSettle, lim: rng.IntN(modelLimiters), pick: rng.IntN(1 << 20), cost: rng.IntN(2), r: rng.IntN(1 << 20)})
				if !realClock {
					ops = append(ops, mop{kind: opAdvance, d: time.Duration(1+rng.Int64N(int64(interval)*int64(c)/2000)) * time.Microsecond})
				} else {
					ops = append(ops, mop{kind: opAdvance, d: time.Duration(rng.Int64N(int64(interval)))})
				}
				ops = append(ops, mop{kind: opDrain, lim: rng.IntN(modelLimiters), n: rng.IntN(2)})
			}
			continue
		}
		if rng.IntN(2) == 0 {
			var d time.Duration
			if realClock {
				switch r := rng.IntN(100); {
				case r < 35:
				case r < 75:
					d = time.Duration(rng.Int64N(int64(5 * time.Millisecond)))
				case r < 97:
					d = time.Duration(rng.Int64N(int64(interval)))
				default:
					d = l.Period
				}
			} else {
				switch r := rng.IntN(100); {
				case r < 35:
				case r < 45:
					d = time.Microsecond
				case r < 70:
					d = time.Duration(1+rng.Int64N(int64(interval/10)/1000)) * time.Microsecond
				case r < 87:
					d = time.Duration(1+rng.Int64N(int64(interval)/1000)) * time.Microsecond
				case r < 92:
					d = interval * time.Duration(1+rng.IntN(4)) / 4
				case r < 97:
					d = time.Duration(int64(interval)+rng.Int64N(int64(2*interval)/1000)*1000) / 1000 * 1000
				default:
					d = l.Period * time.Duration(1+rng.IntN(2))
				}
			}
			if d > 0 {
				ops = append(ops, mop{kind: opAdvance, d: d})
			}
		}
		op := mop{lim: rng.IntN(modelLimiters)}
		switch r := rng.IntN(100); {
		case r < 5:
			op.n = 0
		case r < 8:
			op.n = c + 1 + rng.IntN(2)
		case r < 60:
			op.n = 1 + rng.IntN(min(c, 3))
		default:
			op.n = 1 + rng.IntN(c)
		}
		r := rng.IntN(100)
		switch {
		case mc.reserving:
			switch {
			case r < 45:
				op.kind = opReserve
			case r < 55:
				op.kind = opReserve2
			case r < 85:
				op.kind = opSettle
			default:
				op.kind = opRelease
			}
		case r < 18:
			op.kind = opAllow
		case r < 30:
			op.kind = opAllowPrefetch
		case r < 36:
			op.kind = opAllowAll
		case r < 44:
			op.kind = opDrain
		case r < 62:
			op.kind = opReserve
		case r < 67:
			op.kind = opReserve2
		case r < 71:
			op.kind = opReserveConc
		case r < 94:
			op.kind = opSettle
		default:
			op.kind = opRelease
		}
		if op.kind == opAllowPrefetch && mc.prefetch == 0 {
			op.kind = opAllow
		}
		if op.kind == opReserveConc && mc.conc.Rate == 0 {
			op.kind = opReserve
		}
		if op.kind == opSettle {
			op.pick, op.r = rng.IntN(1<<20), rng.IntN(1<<20)
			switch r := rng.IntN(100); {
			case r < 45:
				op.cost = 0
			case r < 70:
				op.cost = 1
			case r < 85:
				op.cost = 2
			default:
				op.cost = 3
			}
		}
		if op.kind == opRelease {
			op.pick = rng.IntN(1 << 20)
		}
		ops = append(ops, op)
	}
	return ops
}

// ---- environments ----

// menv is where a run happens: Limiters on clients of their own, one
// Redis, one clock.
type menv struct {
	lims      []*core.Limiter
	admin     redis.UniversalClient
	prefix    string
	fake      *fakeClock // nil: the Redis clock, in real time
	giveBacks *atomic.Int64
	close     func()
}

var modelT0 = t0.Add(123457 * time.Microsecond) // not a round number of µs

// modelT0Before1970 is a start of the fake clock before 1970.
var modelT0Before1970 = time.Date(1969, 7, 20, 20, 17, 40, 654321000, time.UTC)

// countHook counts the prefetch give-backs (settlements whose reservation
// id is "+") that Redis has answered, and, with persist, makes every key a
// script call names persistent in the same round trip: on a real server
// with a fake clock, TTLs run in real time and would drop state that the
// fake clock still needs (the scripts read stale state correctly: on
// miniredis with a client clock, keys never expire either).
type countHook struct {
	giveBacks *atomic.Int64
	persist   bool
	client    *redis.Client
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func isScriptCmd(cmd redis.Cmder) bool {
	name := cmd.Name()
	return name == "evalsha" || name == "eval"
}

func (h *countHook) count(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if !isScriptCmd(cmd) || cmd.Err() != nil {
			continue
		}
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && s == "+" {
				h.giveBacks.Add(1)
			}
		}
	}
}

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.persist && isScriptCmd(cmd) { // through the pipeline, with its PERSIST
			p := h.client.Pipeline()
			_ = p.Process(ctx, cmd)
			_, _ = p.Exec(ctx)
			return cmd.Err()
		}
		err := next(ctx, cmd)
		h.count(cmd)
		return err
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		all := cmds
		if h.persist {
			all = cmds[:len(cmds):len(cmds)]
			for _, cmd := range cmds {
				if !isScriptCmd(cmd) {
					continue
				}
				args := cmd.Args()
				n, _ := strconv.Atoi(fmt.Sprint(args[2]))
				for _, key := range args[3 : 3+n] {
					all = append(all, redis.NewIntCmd(ctx, "persist", key))
				}
			}
		}
		err := next(ctx, all)
		h.count(cmds...)
		return err
	}
}

// newMenv: Limiters on clients of newClient, on a fake clock from start,
// or the Redis clock for a zero start.
func newMenv(t testing.TB, newClient func() *redis.Client, start time.Time, persist bool, closeAll func()) *menv {
	env := &menv{prefix: uniquePrefix(), giveBacks: &atomic.Int64{}}
	var clients []*redis.Client
	client := func() *redis.Client {
		c := newClient()
		c.AddHook(&countHook{giveBacks: env.giveBacks, persist: persist, client: c})
		clients = append(clients, c)
		return c
	}
	opts := []core.Option{patient, core.WithPrefix(env.prefix)}
	if !start.IsZero() {
		env.fake = &fakeClock{now: start}
		opts = append(opts, core.WithClock(env.fake.Now))
	}
	for i := 0; i < modelLimiters; i++ {
		o := opts
		if i == 0 { // one Limiter fetches Prefetch at a time, the others adapt
			o = append(o[:len(o):len(o)], core.WithFixedPrefetch())
		}
		env.lims = append(env.lims, core.New(client(), o...))
	}
	env.admin = newClient()
	env.close = func() {
		for _, c := range clients {
			_ = c.Close()
		}
		_ = env.admin.Close()
		if closeAll != nil {
			closeAll()
		}
	}
	if t != nil {
		t.Cleanup(env.close)
	}
	return env
}

// miniredisEnv: an embedded server of its own; a fake client clock (its
// TTLs never run).
func miniredisEnv(t testing.TB) *menv { return miniredisEnvAt(modelT0)(t) }

// miniredisEnvAt is miniredisEnv with the fake clock from start.
func miniredisEnvAt(start time.Time) func(testing.TB) *menv {
	return func(t testing.TB) *menv {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			panic(err)
		}
		return newMenv(t, func() *redis.Client { return redis.NewClient(&redis.Options{Addr: m.Addr()}) }, start, false, m.Close)
	}
}

// standaloneEnv: a real server; a fake client clock (with persistent
// keys), or the Redis clock in real time.
func standaloneEnv(t testing.TB, addr string, fake bool) *menv {
	var start time.Time
	if fake {
		start = modelT0
	}
	return newMenv(t, func() *redis.Client { return redis.NewClient(&redis.Options{Addr: addr}) }, start, fake, nil)
}

// ---- the models ----

type modelKind int

const (
	kindMeter modelKind = iota
	kindStepped
	kindWindow
	kindSlidingWindow
	kindSlidingLog
	kindConcurrency
)

// mentry is a logged admission: n events at `at` (µs), forced for a
// charge; a reservation's is open until settled.
type mentry struct {
	at, n  int64
	forced bool
	open   bool
	win    int64 // fixed window: its window's start
	seq    int64 // a charge: the operation that made it
	end    int64 // concurrency: when its slots are freed
}

type meterState struct{ t, v int64 } // µs; backlog (meter) or tokens (stepped)

type epoch struct{ anchor, from int64 }

// model is the exact reference of one limit's state on the key.
type model struct {
	l         core.Limit
	kind      modelKind
	key       string
	per, rate int64 // period in µs, rate
	capacity  int64

	base    meterState // meter, stepped: the state after the entries folded in
	entries []*mentry  // meter, stepped, sliding log, concurrency
	epochs  []epoch    // stepped: the real step boundaries

	net     map[int64]int64 // fixed window: net events per window start
	charges []mentry        // fixed window: each charge, in the window of win
	lastWin int64           // fixed window: the last window seen, noWin for none

	// A Limiter's prefetched events were counted when it fetched them: a
	// charge (a debt) made after that fetch binds what comes after them,
	// not them (docs/lifecycle.md#prefetch). lease, when above 0, is the
	// operation (seq) of the fetch an admission answered in process came
	// from: charges made after it do not count for that admission.
	// foldBefore keeps the entries a live lease may still need apart from
	// the folded state.
	lease, foldBefore, seq int64
	buckets                map[int64]int64 // sliding window: net events per sub-bucket
	size, k                int64           // sliding window
}

func newModel(l core.Limit, prefix string, start int64) *model {
	m := &model{l: l, key: stateKey(prefix, "k", l), per: l.Period.Microseconds(), rate: int64(l.Rate),
		capacity: int64(l.Capacity()), lastWin: noWin, foldBefore: math.MaxInt64}
	switch {
	case l.Algorithm == core.TokenBucket && l.Stepped:
		m.kind, m.base = kindStepped, meterState{t: start, v: m.capacity}
	case l.Algorithm == core.GCRA || l.Algorithm == "" || l.Algorithm == core.TokenBucket || l.Algorithm == core.LeakyBucket:
		m.kind, m.base = kindMeter, meterState{t: start}
	case l.Algorithm == core.FixedWindow:
		m.kind, m.net = kindWindow, map[int64]int64{}
	case l.Algorithm == core.SlidingWindow:
		k := int64(l.Buckets)
		if k == 0 {
			k = core.DefaultBuckets
		}
		m.kind, m.buckets, m.k, m.size = kindSlidingWindow, map[int64]int64{}, k, m.per/k
	case l.Algorithm == core.SlidingLog:
		m.kind = kindSlidingLog
	case l.Algorithm == core.Concurrency:
		m.kind = kindConcurrency
	default:
		panic("no model for " + l.String())
	}
	return m
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// steps counts the real step boundaries in (a, b].
func (m *model) steps(a, b int64) int64 {
	var n int64
	for i, e := range m.epochs {
		hi := int64(1<<62 - 1)
		if i+1 < len(m.epochs) {
			hi = m.epochs[i+1].from
		}
		from, to := max(a+1, e.from, e.anchor+m.per), min(b, hi-1)
		if to >= from {
			n += floorDiv(to-e.anchor, m.per) - floorDiv(from-1-e.anchor, m.per)
		}
	}
	return n
}

// advance moves a meter or stepped state to at.
func (m *model) advance(s meterState, at int64) meterState {
	if at <= s.t {
		return s
	}
	if m.kind == kindMeter {
		s.v = max(0, s.v-(at-s.t)*m.rate)
	} else if k := m.steps(s.t, at); k > 0 {
		s.v = min(m.capacity, s.v+k*m.rate)
	}
	s.t = at
	return s
}

func (m *model) apply(s meterState, e *mentry) meterState {
	s = m.advance(s, e.at)
	if m.kind == kindMeter {
		s.v += e.n * m.per
	} else {
		s.v -= e.n
	}
	return s
}

// state returns the meter or stepped state at `at` of every entry logged
// (for an admission from a lease, less the charges after its fetch).
func (m *model) state(at int64) meterState {
	for len(m.entries) > 0 && !m.entries[0].open && m.entries[0].at < m.foldBefore {
		m.base = m.apply(m.base, m.entries[0])
		m.entries = m.entries[1:]
	}
	s := m.base
	for _, e := range m.entries {
		if e.forced && m.lease > 0 && e.seq > m.lease {
			continue
		}
		s = m.apply(s, e)
	}
	return m.advance(s, at)
}

// noWin is a fixed window model's lastWin before it has seen one: below
// every window's start, those before 1970 (below 0) included.
const noWin = math.MinInt64

// observe reads what the model needs of the real state after an
// operation on it: a window's start, a stepped bucket's anchor.
func (m *model) observe(ctx context.Context, admin redis.UniversalClient) error {
	switch m.kind {
	case kindWindow:
		v, err := admin.HGet(ctx, m.key, "w").Int64()
		if err == redis.Nil {
			return nil
		}
		if err != nil {
			return err
		}
		m.lastWin = v
	case kindStepped:
		v, err := admin.HGet(ctx, m.key, "t").Int64()
		if err == redis.Nil {
			return nil
		}
		if err != nil {
			return err
		}
		if len(m.epochs) == 0 || (v-m.epochs[len(m.epochs)-1].anchor)%m.per != 0 {
			m.epochs = append(m.epochs, epoch{anchor: v, from: v})
		}
	}
	return nil
}

// admit checks that c events admitted between before and after (µs; the
// same on a fake clock) fit the model at after, the most lenient instant,
// and logs them at before, the most lenient for later checks. It returns
// the entry, and why they do not fit ("" when they do).
func (m *model) admit(before, after, c int64, open bool) (*mentry, string) {
	e := &mentry{at: before, n: c, open: open, end: before + m.per}
	if c == 0 { // a limit charged nothing (ReserveEach): nothing to check or count
		e.end = before
		return e, ""
	}
	why := ""
	switch m.kind {
	case kindMeter:
		s := m.state(after)
		if s.v+c*m.per > m.capacity*m.per {
			why = fmt.Sprintf("%v: %d events admitted at %s, but the bucket holds %s of %d events then (a backlog of %d µs·rate)",
				m.l, c, fmtAt(after), fmtEvents(s.v, m.per), m.capacity, s.v)
		}
		m.entries = append(m.entries, e)
	case kindStepped:
		s := m.state(after)
		if s.v < c {
			why = fmt.Sprintf("%v: %d events admitted at %s, but the bucket holds %d tokens then (steps at %s)",
				m.l, c, fmtAt(after), s.v, m.fmtEpochs())
		}
		m.entries = append(m.entries, e)
	case kindWindow:
		w := m.lastWin
		if w == noWin || after < w || before >= w+m.per {
			why = fmt.Sprintf("%v: %d events admitted at %s, outside the window the state holds (%s)", m.l, c, fmtAt(after), fmtAt(w))
			break
		}
		e.win = w
		net := m.net[w]
		for _, x := range m.charges {
			if x.win == w && m.lease > 0 && x.seq > m.lease {
				net -= x.n
			}
		}
		if net+c > m.rate {
			why = fmt.Sprintf("%v: %d events admitted at %s in the window from %s, which had %d (net of refunds) of %d",
				m.l, c, fmtAt(after), fmtAt(w), m.net[w], m.rate)
		}
		m.net[w] += c
	case kindSlidingWindow:
		cur := floorDiv(after, m.size)
		into := after - cur*m.size
		weighted := m.buckets[cur-m.k] * (m.size - into)
		for i := cur - m.k + 1; i <= cur; i++ {
			weighted += m.buckets[i] * m.size
		}
		if weighted+c*m.size > m.rate*m.size {
			why = fmt.Sprintf("%v: %d events admitted at %s, but the window's weighted count is %s of %d (sub-buckets %s)",
				m.l, c, fmtAt(after), fmtEvents(weighted, m.size), m.rate, m.fmtBuckets(cur))
		}
		for b := range m.buckets {
			if b < cur-2*m.k {
				delete(m.buckets, b)
			}
		}
		m.buckets[floorDiv(before, m.size)] += c
	case kindSlidingLog:
		i := 0
		for i < len(m.entries) && m.entries[i].at <= after-m.per {
			i++
		}
		m.entries = m.entries[i:]
		var n int64
		for _, x := range m.entries {
			n += x.n
		}
		if n+c > m.rate {
			why = fmt.Sprintf("%v: %d events admitted at %s, but (%s, %s] already holds %d (net of refunds) of %d",
				m.l, c, fmtAt(after), fmtAt(after-m.per), fmtAt(after), n, m.rate)
		}
		m.entries = append(m.entries, e)
	case kindConcurrency:
		kept := m.entries[:0]
		var held int64
		for _, x := range m.entries {
			if x.end > after {
				kept = append(kept, x)
				held += x.n
			}
		}
		m.entries = kept
		if held+c > m.rate {
			why = fmt.Sprintf("%v: %d slots taken at %s while %d of %d are held", m.l, c, fmtAt(after), held, m.rate)
		}
		m.entries = append(m.entries, e)
	}
	return e, why
}

// leaseHorizon bounds how long after its fetch a lease of l may answer:
// the lease plus the time of a whole burst, with room to spare.
func leaseHorizon(l core.Limit) int64 {
	return 2*(20_000+int64(l.Capacity())*l.Period.Microseconds()/int64(l.Rate)) + l.Period.Microseconds()
}

// settle applies a settlement at `at` of entry e (reserved n) at cost.
func (m *model) settle(e *mentry, n, cost, at int64) {
	e.open = false
	if m.kind == kindConcurrency {
		e.end = min(e.end, at)
		return
	}
	if cost < n {
		switch m.kind {
		case kindWindow:
			m.net[e.win] -= n - cost
		case kindSlidingWindow:
			m.buckets[floorDiv(e.at, m.size)] -= n - cost
		}
		e.n = cost
		return
	}
	if cost == n {
		return
	}
	extra := cost - n
	switch m.kind {
	case kindWindow: // in the window of now, as observed after the settlement
		if m.lastWin != noWin {
			m.net[m.lastWin] += extra
			kept := m.charges[:0]
			for _, x := range m.charges {
				if x.win+m.per > at {
					kept = append(kept, x)
				}
			}
			m.charges = append(kept, mentry{at: at, n: extra, win: m.lastWin, seq: m.seq})
		}
	case kindSlidingWindow:
		m.buckets[floorDiv(at, m.size)] += extra
	default:
		m.entries = append(m.entries, &mentry{at: at, n: extra, forced: true, seq: m.seq})
	}
}

func (m *model) fmtEpochs() string {
	var s []string
	for _, e := range m.epochs {
		s = append(s, fmt.Sprintf("%s+k·%v from %s", fmtAt(e.anchor), m.l.Period, fmtAt(e.from)))
	}
	return strings.Join(s, "; ")
}

func (m *model) fmtBuckets(cur int64) string {
	var s []string
	for i := cur - m.k; i <= cur; i++ {
		s = append(s, fmt.Sprintf("%s:%d", fmtAt(i*m.size), m.buckets[i]))
	}
	return strings.Join(s, " ")
}

func fmtAt(us int64) string {
	return fmt.Sprintf("+%v", time.Duration(us-modelT0.UnixMicro())*time.Microsecond)
}

func fmtEvents(v, unit int64) string {
	return strconv.FormatFloat(float64(v)/float64(unit), 'f', -1, 64)
}

// ---- the run ----

type outstanding struct {
	r       *core.Reservation
	name    string
	n       int
	ns      []int // each model's reserved cost (ReserveEach's may differ)
	each    bool  // reserved with ReserveEach: settled with SettleEach
	models  []*model
	entries []*mentry
}

type modelResult struct {
	done, failAt                                int
	fail                                        string
	err                                         error
	trace                                       []string
	admitted, local, reserved, refunds, charges int
}

// runOps runs ops in env until one fails or the deadline passes.
func runOps(env *menv, mc modelCase, ops []mop, deadline time.Time) (res modelResult) {
	ctx := context.Background()
	var start int64
	if env.fake != nil {
		start = env.fake.Now().UnixMicro()
	} else {
		tm, err := env.admin.Time(ctx).Result()
		if err != nil {
			res.err = err
			return res
		}
		start = tm.UnixMicro()
	}
	prim := newModel(mc.primary, env.prefix, start)
	models := map[string]*model{"p": prim}
	if mc.companion.Rate > 0 {
		models["c"] = newModel(mc.companion, env.prefix, start)
	}
	if mc.conc.Rate > 0 {
		models["k"] = newModel(mc.conc, env.prefix, start)
	}
	pf := mc.primary
	pf.Prefetch = mc.prefetch
	var open []*outstanding
	lastFetch := make([]int64, len(env.lims)) // per Limiter, its last fetch (µs), 0 none
	fetchSeq := make([]int64, len(env.lims))  // and the operation that made it
	now := func() int64 {
		if env.fake != nil {
			return env.fake.Now().UnixMicro()
		}
		tm, err := env.admin.Time(ctx).Result()
		if err != nil {
			panic(err) // a real server that stopped answering TIME
		}
		return tm.UnixMicro()
	}
	fmtOp := func(i int, at int64, lim int, s string, a ...any) string {
		return fmt.Sprintf("%4d %-14s L%d %s", i, fmtAt(at), lim, fmt.Sprintf(s, a...))
	}
	// settle settles o at costs[k] for its k-th limit (with SettleEach
	// when o.each or costs differ), or releases it.
	settle := func(i, lim int, o *outstanding, costs []int, release bool) error {
		before := now()
		var err error
		what := "Release"
		switch {
		case release:
			err = o.r.Release(ctx)
			costs = o.ns
		case o.each || len(costs) > 1 && costs[0] != costs[1]:
			what = fmt.Sprintf("SettleEach(%v)", costs)
			err = o.r.SettleEach(ctx, costs)
		default:
			what = fmt.Sprintf("Settle(%d)", costs[0])
			err = o.r.Settle(ctx, costs[0])
		}
		if err != nil {
			return fmt.Errorf("%s of %s: %w", what, o.name, err)
		}
		for k, m := range o.models {
			if err := m.observe(ctx, env.admin); err != nil {
				return err
			}
			m.seq = int64(i) + 1
			m.settle(o.entries[k], int64(o.ns[k]), int64(costs[k]), before)
			switch {
			case costs[k] < o.ns[k]:
				res.refunds++
			case costs[k] > o.ns[k]:
				res.charges++
			}
		}
		res.trace = append(res.trace, fmtOp(i, before, lim, "%s of %s (reserved %v)", what, o.name, o.ns))
		return nil
	}
	// decide makes one decision of op (its kind, Limiter and n) and
	// checks it; stop: the run ends (res says why).
	decide := func(i int, op mop) (allowed, stop bool) {
		fail := func(why string) (bool, bool) {
			res.fail = why
			res.trace = append(res.trace, "     ^ "+why)
			return false, true
		}
		lim := env.lims[op.lim]
		var limits []core.Limit
		var ms []*model
		switch op.kind {
		case opAllow, opReserve:
			limits, ms = []core.Limit{mc.primary}, []*model{prim}
		case opAllowPrefetch:
			limits, ms = []core.Limit{pf}, []*model{prim}
		case opAllowAll:
			p := mc.primary
			if op.n%2 == 1 && mc.prefetch > 0 {
				p = pf
			}
			limits, ms = []core.Limit{p, mc.companion}, []*model{prim, models["c"]}
		case opReserve2:
			limits, ms = []core.Limit{mc.primary, mc.companion}, []*model{prim, models["c"]}
		case opReserveConc:
			limits, ms = []core.Limit{mc.primary, mc.conc}, []*model{prim, models["k"]}
		}
		// A decision. With prefetch, a decision that the lease cannot
		// answer gives back what the lease holds if it may still use it:
		// wait for that give-back, so that it lands at this instant.
		held, valid := 0, false
		if op.kind == opAllowPrefetch && env.fake != nil {
			held, valid = lim.Held("k", pf)
		}
		gb := env.giveBacks.Load()
		before := now()
		// Every other two-limit reservation is a ReserveEach, the
		// companion's cost apart from the primary's.
		costs := make([]int, len(limits))
		for k := range costs {
			costs[k] = op.n
		}
		each := op.kind == opReserve2 && i%2 == 1
		if each {
			costs[1] = (op.n*7 + i) % (mc.companion.Capacity() + 2)
		}
		var r core.Result
		var rsv *core.Reservation
		var err error
		switch {
		case each && i%4 == 3: // the companion takes up to its cost (a budget's last tokens)
			rsv, err = lim.ReserveUpTo(ctx, "k", limits, costs, 1<<1)
			if err == nil {
				r = rsv.Result()
			}
		case each:
			rsv, err = lim.ReserveEach(ctx, "k", limits, costs)
			if err == nil {
				r = rsv.Result()
			}
		case op.kind == opAllow || op.kind == opAllowPrefetch:
			r, err = lim.AllowN(ctx, "k", limits[0], op.n)
		case op.kind == opAllowAll:
			r, err = lim.AllowAll(ctx, "k", limits, op.n)
		default:
			rsv, err = lim.Reserve(ctx, "k", limits, op.n)
			if err == nil {
				r = rsv.Result()
			}
		}
		if err != nil {
			res.err = err
			return false, true
		}
		after := before
		if env.fake == nil {
			after = now()
		}
		fromLease := r.Cached && r.Allowed
		if op.kind == opAllowPrefetch && env.fake != nil && op.n > 0 && op.n <= pf.Capacity() && !fromLease && held > 0 && valid {
			if !waitGiveBack(env.giveBacks, gb+1) {
				res.err = fmt.Errorf("op %d: the give-back of %d held events did not reach Redis within 10 s", i, held)
				return false, true
			}
		}
		names := make([]string, len(limits))
		for k, l := range limits {
			names[k] = l.String()
		}
		verb := map[opKind]string{opAllow: "AllowN", opAllowPrefetch: "AllowN", opAllowAll: "AllowAll", opReserve: "Reserve", opReserve2: "Reserve", opReserveConc: "Reserve"}[op.kind]
		line := fmtOp(i, before, op.lim, "%s([%s], %d) = allowed=%v remaining=%d", verb, strings.Join(names, ", "), op.n, r.Allowed, r.Remaining)
		if each {
			line = fmtOp(i, before, op.lim, "ReserveEach([%s], %v) = allowed=%v remaining=%d", strings.Join(names, ", "), costs, r.Allowed, r.Remaining)
		}
		if fromLease {
			line += " (from the lease)"
		} else if r.Cached {
			line += " (deny cache)"
		}
		name := ""
		if rsv != nil && r.Allowed && op.n > 0 {
			name = fmt.Sprintf("r%d", i)
			line += " -> " + name
		}
		res.trace = append(res.trace, line)
		capacity := limits[0].Capacity()
		for _, l := range limits[1:] {
			capacity = min(capacity, l.Capacity())
		}
		for k, l := range limits {
			if r.Allowed && costs[k] > l.Capacity() {
				return fail(fmt.Sprintf("allowed %d events, above the capacity %d of %v", costs[k], l.Capacity(), l))
			}
		}
		if r.Remaining > r.Limit.Capacity() {
			return fail(fmt.Sprintf("Remaining %d above the binding limit's capacity %d (%v)", r.Remaining, r.Limit.Capacity(), r.Limit))
		}
		nothing := true
		for _, c := range costs {
			nothing = nothing && c == 0
		}
		if !r.Allowed || nothing {
			return r.Allowed, false
		}
		res.admitted++
		if fromLease {
			res.local++
		}
		o := &outstanding{r: rsv, name: name, n: op.n, ns: costs, each: each}
		lease := int64(0)
		switch {
		case fromLease:
			lease = fetchSeq[op.lim]
		case op.kind == opAllowPrefetch || op.kind == opAllowAll && limits[0].Prefetch > 0:
			lastFetch[op.lim], fetchSeq[op.lim] = before, int64(i)+1
		}
		fold := int64(math.MaxInt64) // entries before every fetch whose lease may still answer fold
		for _, f := range lastFetch {
			if f > 0 && f > before-leaseHorizon(mc.primary) {
				fold = min(fold, f)
			}
		}
		for k, m := range ms {
			if err := m.observe(ctx, env.admin); err != nil {
				res.err = err
				return false, true
			}
			m.lease, m.foldBefore = lease, fold
			e, why := m.admit(before, after, int64(costs[k]), rsv != nil)
			m.lease = 0
			if why != "" {
				return fail("over the limit: " + why)
			}
			o.models, o.entries = append(o.models, m), append(o.entries, e)
		}
		if rsv != nil {
			res.reserved++
			open = append(open, o)
			if len(open) > 6 { // keep the reservations outstanding few: release one now
				j := i % len(open)
				o := open[j]
				open = append(open[:j], open[j+1:]...)
				if err := settle(i, op.lim, o, nil, true); err != nil {
					res.err = err
					return false, true
				}
			}
		}
		return true, false
	}
	for i, op := range ops {
		if time.Now().After(deadline) {
			break
		}
		res.done = i + 1
		res.failAt = i
		if op.kind == opAdvance {
			if env.fake != nil {
				env.fake.Advance(op.d)
			} else {
				time.Sleep(op.d)
			}
			res.trace = append(res.trace, fmt.Sprintf("%4d advance %v", i, op.d))
			continue
		}
		if op.kind == opSettle || op.kind == opRelease {
			if len(open) == 0 {
				continue
			}
			j := op.pick % len(open)
			o := open[j]
			open = append(open[:j], open[j+1:]...)
			// Each limit's cost from the op's class; a reservation of two
			// limits now and then settles them apart (SettleEach).
			costs := make([]int, len(o.ns))
			for k, n := range o.ns {
				class, r := op.cost, op.r
				if k > 0 && (o.each || op.r%4 == 0) {
					class, r = (op.r>>4)%4, op.r>>6
				}
				costs[k] = n
				switch {
				case class == 0:
					costs[k] = 0
				case class == 1 && n > 0:
					costs[k] = r % n
				case class == 3:
					costs[k] = n + 1 + r%3
					if r%8 == 0 { // now and then a deep debt
						costs[k] = n + 1 + r%(3*mc.primary.Capacity())
					}
				}
			}
			if err := settle(i, op.lim, o, costs, op.kind == opRelease); err != nil {
				res.err = err
				return res
			}
			continue
		}

		if op.kind == opDrain {
			kind := opAllow
			if op.n%2 == 1 && mc.prefetch > 0 {
				kind = opAllowPrefetch
			}
			for k := 0; k < mc.primary.Capacity()+2; k++ {
				allowed, stop := decide(i, mop{kind: kind, lim: op.lim, n: 1})
				if stop {
					return res
				}
				if !allowed {
					break
				}
			}
			continue
		}
		if _, stop := decide(i, op); stop {
			return res
		}
	}
	res.failAt = res.done - 1
	return res
}

func waitGiveBack(n *atomic.Int64, want int64) bool {
	deadline := time.Now().Add(10 * time.Second)
	for n.Load() < want {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Microsecond)
	}
	return true
}

// ---- the defect, as a scenario ----

// TestRefundOutOfOrder: two reservations of 5 on a limit of burst 10;
// the first is refunded in full, time passes, the key is drained, the
// second is refunded in full, the key is drained again: every event
// admitted at that one instant came from an otherwise empty history (both
// reservations were refunded: as if never admitted), so at most the
// capacity may pass at it. A stepped bucket is also run with 2 tokens a
// step and one step in between (the refund of the second reservation must
// not give back tokens that the step has already refilled).
func TestRefundOutOfOrder(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		l    core.Limit
		wait time.Duration
	}{
		{"gcra", core.Limit{Algorithm: core.GCRA, Rate: 10, Period: time.Second, Burst: 10}, 500 * time.Millisecond},
		{"token_bucket", core.Limit{Algorithm: core.TokenBucket, Rate: 10, Period: time.Second, Burst: 10}, 500 * time.Millisecond},
		{"token_bucket_stepped", core.Limit{Algorithm: core.TokenBucket, Rate: 10, Period: time.Second, Burst: 10, Stepped: true}, 500 * time.Millisecond},
		{"token_bucket_stepped_2_per_100ms", core.Limit{Algorithm: core.TokenBucket, Rate: 2, Period: 100 * time.Millisecond, Burst: 10, Stepped: true}, 100 * time.Millisecond},
		{"leaky_bucket", core.Limit{Algorithm: core.LeakyBucket, Rate: 10, Period: time.Second, Burst: 10}, 500 * time.Millisecond},
		{"leaky_bucket_shape", core.Limit{Algorithm: core.LeakyBucket, Rate: 10, Period: time.Second, Burst: 10, Shape: true}, 500 * time.Millisecond},
		{"fixed_window", core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: time.Second}, 500 * time.Millisecond},
		{"sliding_window", core.Limit{Algorithm: core.SlidingWindow, Rate: 10, Period: time.Second}, 500 * time.Millisecond},
		{"sliding_log", core.Limit{Algorithm: core.SlidingLog, Rate: 10, Period: time.Second}, 500 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			m := miniredis.RunT(t)
			rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			clock := &fakeClock{now: t0}
			lim := core.New(rdb, core.WithClock(clock.Now), patient)
			limits := []core.Limit{c.l}
			var steps []string
			reserve := func() *core.Reservation {
				r, err := lim.Reserve(ctx, "k", limits, 5)
				if err != nil || !r.Result().Allowed {
					t.Fatalf("Reserve 5: %+v, %v", r, err)
				}
				return r
			}
			settle := func(r *core.Reservation, what string) {
				if err := r.Settle(ctx, 0); err != nil {
					t.Fatal(err)
				}
				steps = append(steps, what+" settled at 0")
			}
			drain := func() int {
				n := 0
				for i := 0; i < 100; i++ {
					res, err := lim.Allow(ctx, "k", c.l)
					if err != nil {
						t.Fatal(err)
					}
					if !res.Allowed {
						break
					}
					n++
				}
				steps = append(steps, fmt.Sprintf("drained: %d", n))
				return n
			}
			first, second := reserve(), reserve()
			steps = append(steps, "reserved 5 and 5")
			settle(first, "the first")
			clock.Advance(c.wait)
			steps = append(steps, fmt.Sprintf("waited %v", c.wait))
			got := drain()
			settle(second, "the second")
			got += drain()
			if got > c.l.Capacity() {
				t.Errorf("%v: %d events admitted at one instant, after refunds that leave nothing else admitted; the capacity is %d (%s)",
					c.l, got, c.l.Capacity(), strings.Join(steps, ", "))
			}
		})
	}
}

// ---- two more defects the model found ----

// TestSlidingLogRefundThenAllow: a sliding log names the members of plain
// admissions "<µs>:<i>", i counted from the members already logged at that
// µs. Once a refund has removed a reservation's members logged at the
// same µs, the count is below the highest i in use, a new member takes an
// existing name, and ZADD adds nothing: admitted, never counted. Here 5
// are admitted at one instant after a reservation of 3 was refunded in
// full, so at most 5 more may pass at that instant.
func TestSlidingLogRefundThenAllow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	clock := &fakeClock{now: t0}
	lim := core.New(rdb, core.WithClock(clock.Now), patient)
	l := core.Limit{Algorithm: core.SlidingLog, Rate: 10, Period: time.Second}
	r, err := lim.Reserve(ctx, "k", []core.Limit{l}, 3)
	if err != nil || !r.Result().Allowed {
		t.Fatalf("Reserve 3: %+v, %v", r, err)
	}
	check(t, "5 more", allowN(t, lim, "k", l, 5), true, 2)
	if err := r.Settle(ctx, 0); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := 0; i < 20 && allowN(t, lim, "k", l, 1).Allowed; i++ {
		n++
	}
	if n > 5 {
		t.Errorf("%v: after a refund of 3 at one instant with 5 admitted, %d more admitted at that instant; want at most 5", l, n)
	}
}

// TestPrefetchAfterCharge: a Limiter holds prefetched events; another
// reserves what is left and settles at a cost far above it (a charge: the
// key goes into debt, and later requests must wait it out). The held
// events were counted when they were fetched, before the debt: the holder
// may still admit them (and no more), and its next decision that reaches
// Redis waits the debt out (docs/lifecycle.md#prefetch).
func TestPrefetchAfterCharge(t *testing.T) {
	t.Parallel()
	for _, l := range []core.Limit{
		{Algorithm: core.GCRA, Rate: 10, Period: time.Second, Burst: 10, Prefetch: 5},
		{Algorithm: core.TokenBucket, Rate: 10, Period: time.Second, Burst: 10, Prefetch: 5},
		{Algorithm: core.FixedWindow, Rate: 10, Period: time.Second, Prefetch: 5},
	} {
		t.Run(string(l.Algorithm), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			m := miniredis.RunT(t)
			client := func() *redis.Client {
				c := redis.NewClient(&redis.Options{Addr: m.Addr()})
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			clock := &fakeClock{now: t0}
			holder := core.New(client(), core.WithClock(clock.Now), patient, core.WithFixedPrefetch())
			other := core.New(client(), core.WithClock(clock.Now), patient)
			plain := l
			plain.Prefetch = 0
			if res := allowN(t, holder, "k", l, 1); !res.Allowed {
				t.Fatalf("the first: %+v", res)
			}
			if held, ok := holder.Held("k", l); held != 5 || !ok {
				t.Fatalf("held %d (valid %v), want 5", held, ok)
			}
			r, err := other.Reserve(ctx, "k", []core.Limit{plain}, 4)
			if err != nil || !r.Result().Allowed {
				t.Fatalf("Reserve 4: %+v, %v", r.Result(), err)
			}
			if err := r.Settle(ctx, 14); err != nil { // 10 more: a debt
				t.Fatal(err)
			}
			if res := allowN(t, other, "k", plain, 0); res.Remaining != 0 {
				t.Fatalf("after the charge: %+v, want 0 remaining (in debt)", res)
			}
			for i := range 5 {
				if res := allowN(t, holder, "k", l, 1); !res.Allowed || !res.Cached {
					t.Fatalf("held event %d: %+v; want admitted from the lease", i+1, res)
				}
			}
			// 1 + 5 held + 4 reserved: the burst, counted before the debt;
			// the 10 charged after them are a debt the next one waits out.
			if res := allowN(t, holder, "k", l, 1); res.Allowed || res.RetryAfter <= 0 {
				t.Errorf("%v: after the lease, %+v; want denied in debt", l, res)
			}
		})
	}
}
