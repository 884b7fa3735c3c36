package redlimit_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// scriptCount counts the script calls a client sends, alone or in a
// pipeline.
type scriptCount struct{ n atomic.Int64 }

func (c *scriptCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *scriptCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}

func (c *scriptCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *scriptCount) count(cmd redis.Cmder) {
	if name := cmd.Name(); name == "evalsha" || name == "eval" {
		c.n.Add(1)
	}
}

// nest runs r through policies, outermost first, to a handler that
// answers 200, and returns each policy's Decision.
func nest(policies []redlimit.Policy, r *http.Request) []redlimit.Decision {
	decisions := make([]redlimit.Decision, len(policies))
	var serve func(i int, w http.ResponseWriter, r *http.Request) int
	serve = func(i int, w http.ResponseWriter, r *http.Request) int {
		if i == len(policies) {
			w.WriteHeader(http.StatusOK)
			return http.StatusOK
		}
		decisions[i] = redlimit.Serve(policies[i], w, r, func(w http.ResponseWriter, r *http.Request) int { return serve(i+1, w, r) })
		return 0
	}
	serve(0, httptest.NewRecorder(), r)
	return decisions
}

// TestOneDeadlinePerRequest: one request crosses three policies (a
// global limit, a login limit, a per-user limit) on a Redis that stopped
// answering (SIGSTOP), before the breaker opens. The first decision waits
// the Limiter's timeout; the two after it share the request's deadline,
// which that wait used up, so they fail at once, without sending
// anything to Redis: one script call in all, and the request waits one
// timeout, not three (each policy then applies its failure policy).
func TestOneDeadlinePerRequest(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	sent := new(scriptCount)
	rdb.AddHook(sent)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lim := core.New(rdb, core.WithLogger(quiet)) // the default timeout, 100 ms
	var policies []redlimit.Policy
	for _, name := range []string{"global", "login", "user"} {
		policies = append(policies, mustPolicy(t, lim, core.PerMinute(100), redlimit.WithName(name)))
	}
	request := func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/login", nil)
		r.RemoteAddr = "192.0.2.12:1"
		return r
	}
	for i, d := range nest(policies, request()) { // Redis up: scripts loaded, a connection open
		if d.Outcome != redlimit.OutcomeAllowed {
			t.Fatalf("Redis up, policy %d: %+v", i, d)
		}
	}
	srv.Pause()
	t.Cleanup(srv.Resume)
	sent.n.Store(0)
	began := time.Now()
	decisions := nest(policies, request())
	waited := time.Since(began)
	t.Logf("3 policies on a stopped Redis: the request waited %v (the timeout %v), %d script calls sent",
		waited.Round(time.Millisecond), core.DefaultTimeout, sent.n.Load())
	for i, d := range decisions {
		if d.Outcome != redlimit.OutcomeError || !d.Allowed() || !errors.Is(d.Err, core.ErrTimeout) || !errors.Is(d.Err, context.DeadlineExceeded) {
			t.Errorf("policy %d (%s): %+v; want a timeout, wrapping core.ErrTimeout and context.DeadlineExceeded, let through (FailOpen)", i, d.Policy, d)
		}
	}
	if n := sent.n.Load(); n != 1 {
		t.Fatalf("%d script calls sent for one request of 3 policies on a stopped Redis; want 1: the later decisions share the deadline the first used up", n)
	}
}

// TestDeadlineLeavesHandlersOut: the request's deadline counts the time
// its decisions wait, not the time the handlers between its policies
// take: an authentication step slower than the timeout between two
// policies leaves the second one its whole timeout, and Redis decides it.
func TestDeadlineLeavesHandlersOut(t *testing.T) {
	t.Parallel()
	m := redistest.Standalone(t)
	lim := core.New(m.Client(t), core.WithTimeout(50*time.Millisecond))
	global := mustPolicy(t, lim, core.PerMinute(100), redlimit.WithName("global"))
	user := mustPolicy(t, lim, core.PerMinute(100), redlimit.WithName("user"), redlimit.WithFailure(redlimit.FailClosed))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	var second redlimit.Decision
	redlimit.Serve(global, httptest.NewRecorder(), r, func(w http.ResponseWriter, r *http.Request) int {
		time.Sleep(150 * time.Millisecond) // authentication: three times the timeout
		second = redlimit.Serve(user, w, r, func(http.ResponseWriter, *http.Request) int { return http.StatusOK })
		return 0
	})
	if second.Outcome != redlimit.OutcomeAllowed || second.Err != nil {
		t.Fatalf("the second policy after a slow handler: %+v; want Redis's decision", second)
	}
}
