package core_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redlimit/redlimit/core"
)

// The model check's environments: Limiters on clients of their own, one
// Redis, one clock.

// menv is where a run happens: Limiters on clients of their own, one
// Redis, one clock.
type menv struct {
	lims      []*core.Limiter
	admin     redis.UniversalClient
	prefix    string
	fake      *fakeClock // nil: the Redis clock, in real time
	giveBacks *atomic.Int64
	faults    *faultHook // on Limiter modelFaulty's client; nil on the Redis clock
	close     func()
}

var modelT0 = t0.Add(123457 * time.Microsecond) // not a round number of µs

// modelT0Before1970 is a start of the fake clock before 1970.
var modelT0Before1970 = time.Date(1969, 7, 20, 20, 17, 40, 654321000, time.UTC)

// countHook counts the prefetch give-backs (settlements that say so,
// readScriptCall) that Redis has answered, and, with persist, makes every key a
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
	return (name == "evalsha" || name == "eval") && !core.IsLossCheck(cmd.Args())
}

func (h *countHook) count(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if !isScriptCmd(cmd) || cmd.Err() != nil {
			continue
		}
		for _, c := range readScriptCalls(cmd) {
			if !c.decision && c.giveback {
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
		o := opts[:len(opts):len(opts)]
		c := client()
		switch {
		case i == 0: // one Limiter fetches Prefetch at a time, the others adapt
			o = append(o, core.WithFixedPrefetch())
		case i == modelFaulty && env.fake != nil: // faults on its client (model_faults_test.go)
			env.faults = newFaultHook()
			c.AddHook(env.faults)
			o = append(o, core.WithBatchScript(false), core.WithBreaker(0))
		}
		env.lims = append(env.lims, core.New(c, o...))
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
