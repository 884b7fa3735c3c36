package core_test

import (
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

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
// fractions of the emission interval, whole periods). And the ways state
// changes besides (issue 32):
//
//   - opChange: the primary limit's Rate and Burst change (its algorithm,
//     period and unit kept, and so its state, as RuleSet.Update and a
//     named policy keep it) for every Limiter; a reservation keeps the
//     limit it was made with when it is settled;
//   - opStep: the clock steps back, 1 µs to 3 s, or far forward;
//   - faults on the client side (model_faults_test.go): one Limiter's
//     decisions and settlements reach Redis and run there, and then their
//     reply is lost or their caller's context is cancelled; the model logs
//     what really ran (a lost reserving decision's admissions stand and
//     are never settled);
//   - opHTTP: reservations made and settled by the HTTP flow
//     (model_http_test.go), whose handler reports its usage and may panic;
//   - opCheck, and the end of every run: every reservation released, no
//     Concurrency slot may stay held (the Limiter frees those of lost
//     calls in the background), within 3 s of real time, the clock
//     standing still.
//
// Clusters of operations make issue 32's cases likely: a reservation made
// under one rate and refunded under another; one that outlives its key's
// state, the clock stepping back before its refund; lost reserving
// decisions and settlements followed by a check of the slots.
//
// After every admission, the log of admissions is replayed through a
// model of each limit without prefetch, and the new admission must fit:
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
//     backlog at t plus c·Period is at most burst·Period. GCRA counts in
//     the same exact units (gcd(Period, Rate)), its interval unrounded;
//     shape's MaxDelay only makes it stricter.
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
// Those of a meter and of the stepped bucket are exact only for one rate
// and a clock that never goes back. After a change of the limit, and once
// the clock has gone back, they are checked instead by the span bound
// (model.spanAdmit says why it holds): no span [s, t] of the instants the
// admissions count at holds more, net of refunds, than capacity +
// ceil(Rate·(t−s)/Period) (stepped: capacity + Rate per step in (s, t]),
// over the admissions since the change, or since the key was made anew
// behind the clock it was deleted at (a fresh start); an admission counts
// at its clock, or at its bucket's own clock when the clock went back (a
// token or leaky bucket refills nothing meanwhile). The others' state
// does not depend on the rate: their models go on, at the rate in force
// (an admission to a fixed window fits only if the window's count, with
// it, is at most the Rate now in force: what the script checks, and so
// each window started after a change holds at most its Rate, one that
// straddles a change at most the larger), and read the clock as it is (a
// fixed window's admission may come before the window's start; a sliding
// log counts what the clock left ahead of it, as the script does).
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
	// alts are the rates and bursts opChange changes primary to (its
	// algorithm, period and unit kept, and so its state): the first is its own.
	alts [][2]int
}

// alt returns primary with the rate and burst of alts[i].
func (mc modelCase) alt(i int) core.Limit {
	l := mc.primary
	l.Rate, l.Burst = mc.alts[i][0], mc.alts[i][1]
	return l
}

const modelPeriod = time.Second

var modelConc = core.Limit{Algorithm: core.Concurrency, Rate: 3, Period: modelPeriod}

var modelCases = []modelCase{
	{name: "gcra", primary: core.Limit{Algorithm: core.GCRA, Rate: 10, Period: modelPeriod, Burst: 10}, prefetch: 4,
		companion: core.Limit{Algorithm: core.SlidingLog, Rate: 25, Period: 3 * modelPeriod}, conc: modelConc,
		alts: [][2]int{{10, 10}, {3, 3}, {20, 15}}},
	{name: "token_bucket", primary: core.Limit{Algorithm: core.TokenBucket, Rate: 10, Period: modelPeriod, Burst: 15}, prefetch: 5,
		companion: core.Limit{Algorithm: core.FixedWindow, Rate: 30, Period: 3 * modelPeriod}, conc: modelConc,
		alts: [][2]int{{10, 15}, {3, 5}, {25, 20}}},
	{name: "token_bucket_stepped", primary: core.Limit{Algorithm: core.TokenBucket, Rate: 2, Period: 200 * time.Millisecond, Burst: 10, Stepped: true},
		companion: core.Limit{Algorithm: core.SlidingLog, Rate: 25, Period: 3 * modelPeriod}, conc: modelConc,
		alts: [][2]int{{2, 10}, {1, 4}, {5, 12}}},
	{name: "leaky_bucket", primary: core.Limit{Algorithm: core.LeakyBucket, Rate: 10, Period: modelPeriod, Burst: 10},
		companion: core.Limit{Algorithm: core.SlidingLog, Rate: 25, Period: 3 * modelPeriod}, conc: modelConc,
		alts: [][2]int{{10, 10}, {3, 5}, {20, 15}}},
	{name: "leaky_bucket_shape", primary: core.Limit{Algorithm: core.LeakyBucket, Rate: 10, Period: modelPeriod, Burst: 10, Shape: true, MaxDelay: 700 * time.Millisecond},
		companion: core.Limit{Algorithm: core.GCRA, Rate: 25, Period: 3 * modelPeriod, Burst: 15}, conc: modelConc,
		alts: [][2]int{{10, 10}, {3, 5}, {20, 15}}},
	{name: "fixed_window", primary: core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: modelPeriod}, prefetch: 4,
		companion: core.Limit{Algorithm: core.GCRA, Rate: 25, Period: 3 * modelPeriod, Burst: 15}, conc: modelConc,
		alts: [][2]int{{10, 0}, {3, 0}, {25, 0}}},
	{name: "sliding_window", primary: core.Limit{Algorithm: core.SlidingWindow, Rate: 10, Period: modelPeriod, Buckets: 5},
		companion: core.Limit{Algorithm: core.GCRA, Rate: 25, Period: 3 * modelPeriod, Burst: 15}, conc: modelConc,
		alts: [][2]int{{10, 0}, {3, 0}, {25, 0}}},
	{name: "sliding_log", primary: core.Limit{Algorithm: core.SlidingLog, Rate: 10, Period: modelPeriod},
		companion: core.Limit{Algorithm: core.GCRA, Rate: 25, Period: 3 * modelPeriod, Burst: 15}, conc: modelConc,
		alts: [][2]int{{10, 0}, {3, 0}, {25, 0}}},
	{name: "concurrency", primary: modelConc, reserving: true,
		companion: core.Limit{Algorithm: core.GCRA, Rate: 10, Period: modelPeriod, Burst: 10},
		alts:      [][2]int{{3, 0}, {1, 0}, {6, 0}}},
}

// TestModel runs modelCases on miniredis and on a real redis-server with a
// fake clock, and a few on the Redis clock in real time.
func TestModel(t *testing.T) {
	t.Parallel()
	ops, seed, long := modelSettings(t)
	t.Logf("seed %d (replay: -model.seed=%d), %d operations per run on miniredis", seed, seed, ops)
	budget := 3 * time.Second
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
	r := runOps(env, mc, ops, start.Add(budget), 3*time.Second)
	t.Logf("%d of %d operations in %v: %d admissions (%d answered in process), %d reservations, %d refunds, %d charges; %d changes of the limit, %d steps back of the clock, %d replies lost or callers gone, %d HTTP requests served, %d checks of the slots",
		r.done, len(ops), time.Since(start).Round(time.Millisecond), r.admitted, r.local, r.reserved, r.refunds, r.charges,
		r.changes, r.backs, r.lost, r.served, r.checks)
	if r.fail == "" {
		if r.err != nil {
			t.Fatalf("seed %d: op %d: %v", seed, r.failAt, r.err)
		}
		return
	}
	trace := r.trace
	where := "this run"
	if env.fake != nil { // shorten it, replaying on miniredis
		short, sr, replays := shrink(mc, ops[:r.failAt+1], r.class, 10*time.Second)
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
// miniredis as class says (the same check of the same limit): it drops
// chunks, halving their size, while the time lasts.
func shrink(mc modelCase, ops []mop, class string, budget time.Duration) ([]mop, modelResult, int) {
	deadline := time.Now().Add(budget)
	replay := func(ops []mop) modelResult {
		env := miniredisEnv(nil)
		defer env.close()
		return runOps(env, mc, ops, deadline.Add(10*time.Second), time.Second)
	}
	best := replay(ops)
	replays := 1
	if best.fail == "" || best.class != class {
		return ops, modelResult{}, replays
	}
	ops = ops[:best.failAt+1]
	for chunk := len(ops) / 2; chunk >= 1; chunk /= 2 {
		for i := 0; i+chunk <= len(ops) && time.Now().Before(deadline) && replays < 3000; {
			cand := append(append([]mop(nil), ops[:i]...), ops[i+chunk:]...)
			replays++
			if r := replay(cand); r.fail != "" && r.class == class {
				ops, best = cand[:r.failAt+1], r
				continue
			}
			i += chunk
		}
	}
	return ops, best, replays
}
