package core_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// replyError is an error reply as Redis sends it: go-redis's own type
// for one is internal, and it tells them apart by this method.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// refuseHook answers the first n script commands that match with err,
// without sending them (Redis refused them: they did not run), or, when
// after is set, sends them and then reports err (the reply was lost: they
// ran). It counts the script commands that reached Redis.
type refuseHook struct {
	err   error
	after bool
	match func(args []any) bool

	mu   sync.Mutex
	left int
	sent int
}

func (h *refuseHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *refuseHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isScript(cmd) {
			return next(ctx, cmd)
		}
		hit := h.take(cmd)
		if hit && !h.after {
			cmd.SetErr(h.err)
			return h.err
		}
		h.mu.Lock()
		h.sent++
		h.mu.Unlock()
		err := next(ctx, cmd)
		if hit {
			cmd.SetErr(h.err)
			return h.err
		}
		return err
	}
}

func (h *refuseHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var pass, hits []redis.Cmder
		for _, cmd := range cmds {
			hit := isScript(cmd) && h.take(cmd)
			if hit && !h.after {
				cmd.SetErr(h.err)
				continue
			}
			if hit {
				hits = append(hits, cmd)
			}
			if isScript(cmd) {
				h.mu.Lock()
				h.sent++
				h.mu.Unlock()
			}
			pass = append(pass, cmd)
		}
		var err error
		if len(pass) > 0 {
			err = next(ctx, pass)
		}
		for _, cmd := range hits {
			cmd.SetErr(h.err)
		}
		return err
	}
}

// take reports whether cmd is one of the first left that match.
func (h *refuseHook) take(cmd redis.Cmder) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.left > 0 && h.match(cmd.Args()) {
		h.left--
		return true
	}
	return false
}

func (h *refuseHook) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent
}

func anyScript([]any) bool { return true }

// warmUp makes one decision on another key, so that Redis has the script
// (a first call is refused as NOSCRIPT and sent again with its source),
// then sets the hook to refuse the next n calls and to count afresh.
func warmUp(t *testing.T, lim *core.Limiter, h *refuseHook, l core.Limit, n int) {
	t.Helper()
	if _, err := lim.Allow(context.Background(), "warm-up", l); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.left, h.sent = n, 0
	h.mu.Unlock()
}

// TestResendRefused: a call Redis refused without running it (a
// Cluster's TRYAGAIN, CLUSTERDOWN, READONLY, MOVED or ASK) is sent once
// more and counted once; refused twice, the error is the refusal's. A
// TRYAGAIN (the call's keys are split while their slot moves) is sent
// again every 10 ms while its caller waits, on a client that bounds
// commands by their context and one that does not; refused until then,
// the error is the refusal's, not a timeout.
func TestResendRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	for _, code := range []string{"TRYAGAIN Multiple keys request during rehashing of slot",
		"CLUSTERDOWN The cluster is down", "READONLY You can't write against a read only replica.",
		"MOVED 1 127.0.0.1:1", "ASK 1 127.0.0.1:1"} {
		name, _, _ := strings.Cut(code, " ")
		for _, bounded := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ContextTimeoutEnabled=%v", name, bounded), func(t *testing.T) {
				ctx := context.Background()
				rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: bounded})
				t.Cleanup(func() { rdb.Close() })
				hook := &refuseHook{err: replyError(code), match: anyScript}
				rdb.AddHook(hook)
				lim := core.New(rdb, core.WithPrefix(uniquePrefix()), core.WithTimeout(time.Second))
				l := core.PerHour(10)
				warmUp(t, lim, hook, l, 1)
				if res, err := lim.Allow(ctx, "k", l); err != nil || !res.Allowed {
					t.Fatalf("refused once as %s: %+v, %v; want it sent again and allowed", name, res, err)
				}
				if hook.count() != 1 {
					t.Fatalf("%d calls reached Redis, want 1 (the one sent again)", hook.count())
				}
				want := 9
				if name == "TRYAGAIN" {
					warmUp(t, lim, hook, l, 5) // sent again 10 ms later, until it runs
					if res, err := lim.Allow(ctx, "k", l); err != nil || !res.Allowed {
						t.Fatalf("refused 5 times as TRYAGAIN: %+v, %v; want it sent until it runs", res, err)
					}
					want--
					warmUp(t, lim, hook, l, 1_000_000)
				} else {
					warmUp(t, lim, hook, l, 2)
				}
				began := time.Now()
				_, err := lim.Allow(ctx, "k", l)
				// The refusal's error; or, when the time ran out while the
				// last resend was on its way (a loaded machine), a timeout
				// that names the refusal: that call may still have run.
				if err == nil || !strings.Contains(err.Error(), name) ||
					errors.Is(err, core.ErrTimeout) && (name != "TRYAGAIN" || !strings.Contains(err.Error(), "last failed with: "+name)) {
					t.Fatalf("refused until the end: %v after %v, want the refusal", err, time.Since(began))
				}
				hook.mu.Lock()
				hook.left = 0
				hook.mu.Unlock()
				if res, _ := lim.AllowN(ctx, "k", l, 0); res.Remaining != want {
					t.Fatalf("%d left, want %d: refused decisions count nothing", res.Remaining, want)
				}
			})
		}
	}
}

// TestResendTimeoutNamesRefusal: a caller whose time runs out while its
// call waits for a slot's keys to move gets a timeout that names the
// refusal (TRYAGAIN), on a client that bounds commands by their context and
// one that does not. Redis refuses the call and its resend at once, then
// stalls the next resend past the timeout.
func TestResendTimeoutNamesRefusal(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	for _, bounded := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", bounded), func(t *testing.T) {
			t.Parallel()
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: bounded})
			t.Cleanup(func() { rdb.Close() })
			stall := &stallHook{d: 3 * time.Second}
			stall.pass.Store(1 << 40) // until the warm-up is done
			rdb.AddHook(stall)        // outermost: it sees the calls the refusals answer
			hook := &refuseHook{err: replyError("TRYAGAIN Multiple keys request during rehashing of slot"), match: anyScript}
			rdb.AddHook(hook)
			lim := core.New(rdb, core.WithPrefix(uniquePrefix()), core.WithTimeout(time.Second))
			l := core.PerHour(10)
			warmUp(t, lim, hook, l, 1_000_000)
			stall.pass.Store(2)
			began := time.Now()
			_, err := lim.Allow(context.Background(), "k", l)
			if !errors.Is(err, core.ErrTimeout) || !strings.Contains(err.Error(), "TRYAGAIN") {
				t.Fatalf("%v after %v; want a timeout that names the refusal (TRYAGAIN)", err, time.Since(began))
			}
			if stall.stalled.Load() == 0 {
				t.Fatal("no call stalled: the timeout came before the resend that stalls")
			}
		})
	}
}

// stallHook lets pass script calls through at once, then holds each
// later one for d or until its context ends.
type stallHook struct {
	d       time.Duration
	pass    atomic.Int64
	stalled atomic.Int64
}

func (h *stallHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *stallHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.hold(ctx, cmd)
		return next(ctx, cmd)
	}
}

func (h *stallHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.hold(ctx, cmds...)
		return next(ctx, cmds)
	}
}

func (h *stallHook) hold(ctx context.Context, cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if isScript(cmd) && h.pass.Add(-1) < 0 {
			h.stalled.Add(1)
			timer := time.NewTimer(h.d)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
			return
		}
	}
}

// TestResendBatchAsSingles: a batch of decisions of one key refused as
// TRYAGAIN (on a Cluster, its slot's keys split between two nodes) is
// sent again as single decisions, each counted once.
func TestResendBatchAsSingles(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	refuse := &refuseHook{err: replyError("TRYAGAIN Multiple keys request during rehashing of slot"), left: 1,
		match: core.IsBatch}
	hold, trips := newHoldHook(false, isDecision), &roundTrips{}
	rdb.AddHook(hold)
	rdb.AddHook(refuse)
	rdb.AddHook(trips)
	lim := core.New(rdb, core.WithPrefix(uniquePrefix()), core.WithPipelines(1), patient)
	l := core.PerHour(100)
	const n = 10
	results, errs := queueBehind(t, lim, hold, l, n, func(i int) (core.Result, error) {
		return lim.Allow(context.Background(), fmt.Sprint("k", i%3), l)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, res := range results {
		if !res.Allowed {
			t.Fatalf("decision %d: %+v", i, res)
		}
	}
	refuse.mu.Lock()
	left := refuse.left
	refuse.mu.Unlock()
	if left != 0 {
		t.Fatal("no batch was refused: the test did not batch")
	}
	if got := trips.batchCalls.Load(); got != 0 {
		t.Fatalf("%d batch calls ran; want none: the refused one was sent again as single calls", got)
	}
	for k := range 3 {
		want := 100 - (n+2-k)/3 // k0: 4 of 10, k1: 3, k2: 3
		if res, _ := lim.AllowN(context.Background(), fmt.Sprint("k", k), l, 0); res.Remaining != want {
			t.Fatalf("k%d: %d left, want %d: each decision counted once", k, res.Remaining, want)
		}
	}
}

// TestNoResendAfterRun: a call whose reply was lost may have run: it is
// never sent again, and its error is the client's.
func TestNoResendAfterRun(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	hook := &refuseHook{err: io.ErrUnexpectedEOF, after: true, match: anyScript}
	rdb.AddHook(hook)
	lim := core.New(rdb, core.WithPrefix(uniquePrefix()), patient)
	l := core.PerHour(10)
	warmUp(t, lim, hook, l, 1)
	if _, err := lim.Allow(context.Background(), "k", l); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a lost reply: %v, want the client's error", err)
	}
	if res, _ := lim.AllowN(context.Background(), "k", l, 0); res.Remaining != 9 {
		t.Fatalf("%d left, want 9: the decision ran once and was not sent again", res.Remaining)
	}
}
