package core_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func silentClient(t *testing.T) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Silent(t)})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestBreakerOpens: against a Redis that never answers, decisions time out
// until they have failed for the breaker's span; then they fail at once
// with ErrUnavailable, which says why, and the Limiter logs it once.
func TestBreakerOpens(t *testing.T) {
	t.Parallel()
	var log syncBuffer
	lim := core.New(silentClient(t), core.WithTimeout(20*time.Millisecond), core.WithBreaker(100*time.Millisecond),
		core.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	l := core.PerHour(1)
	began := time.Now()
	var timeouts int
	var err error
	for time.Since(began) < 5*time.Second {
		_, err = lim.Allow(context.Background(), "k", l)
		if !errors.Is(err, core.ErrTimeout) {
			break
		}
		timeouts++
	}
	if !errors.Is(err, core.ErrUnavailable) || errors.Is(err, core.ErrTimeout) || !strings.Contains(err.Error(), "within 20ms") {
		t.Fatalf("after %d timeouts: %v, want ErrUnavailable naming (not wrapping) the last error", timeouts, err)
	}
	if timeouts < core.BreakerMinFailures || time.Since(began) < 100*time.Millisecond {
		t.Fatalf("opened after %d timeouts and %v; want at least %d and 100ms", timeouts, time.Since(began), core.BreakerMinFailures)
	}
	t.Logf("opened after %d timeouts in %v", timeouts, time.Since(began))
	var fast int
	for i := 0; i < 20; i++ {
		if _, err := lim.Allow(context.Background(), "k", l); errors.Is(err, core.ErrUnavailable) {
			fast++
		}
	}
	if fast < 15 { // one in a while is a probe, which times out
		t.Fatalf("%d of 20 decisions failed fast with the breaker open", fast)
	}
	if got := strings.Count(log.String(), "Redis is failing"); got != 1 {
		t.Fatalf("%d log lines about the failure, want 1:\n%s", got, log.String())
	}
}

// TestBreakerOpensCounted: BreakerOpens counts each time the breaker
// opens, not the decisions it fails, and keeps the count once it closes.
// Redis is paused twice and resumed once between.
func TestBreakerOpensCounted(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	lim := core.New(srv.Client(t), core.WithTimeout(20*time.Millisecond), core.WithBreaker(100*time.Millisecond),
		core.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	l := core.PerHour(1_000_000)
	// until sends decisions, a millisecond apart, until one's error
	// satisfies done, for at most 5 s.
	until := func(what string, done func(error) bool) {
		t.Helper()
		began := time.Now()
		var err error
		for try := 0; try < 5000 && time.Since(began) < 5*time.Second; try++ {
			if _, err = lim.Allow(context.Background(), "k", l); done(err) {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatalf("%s: not within 5 s; the last decision: %v", what, err)
	}
	check := func(when string, open bool, opens uint64) {
		t.Helper()
		if lim.Stats() != (core.Stats{BreakerOpen: open, BreakerOpens: opens}) {
			t.Fatalf("%s: Stats %+v; want BreakerOpen %v, BreakerOpens %d", when, lim.Stats(), open, opens)
		}
	}
	failsFast := func(err error) bool { return errors.Is(err, core.ErrUnavailable) }
	succeeds := func(err error) bool { return err == nil }

	until("a first success", succeeds)
	check("before any failure", false, 0)
	srv.Pause()
	until("the breaker opening", failsFast)
	check("opened", true, 1)
	for i := 0; i < 20; i++ {
		lim.Allow(context.Background(), "k", l) // fail fast, or a probe that times out
	}
	check("still open", true, 1)
	srv.Resume()
	until("the breaker closing", succeeds)
	check("closed", false, 1)
	srv.Pause()
	until("the breaker opening again", failsFast)
	check("opened again", true, 2)
}

// TestBreakerOff: WithBreaker(0) keeps asking, whatever happens.
func TestBreakerOff(t *testing.T) {
	t.Parallel()
	lim := core.New(silentClient(t), core.WithTimeout(5*time.Millisecond), core.WithBreaker(0))
	for i := 0; i < 30; i++ {
		if _, err := lim.Allow(context.Background(), "k", core.PerHour(1)); !errors.Is(err, core.ErrTimeout) {
			t.Fatalf("decision %d: %v, want a timeout every time", i, err)
		}
	}
	if n := lim.Stats().BreakerOpens; n != 0 {
		t.Fatalf("BreakerOpens %d with the breaker off, want 0", n)
	}
}

// TestBreakerIgnoresCallersLeaving: contexts that end before the timeout
// are the callers' doing, not Redis's failure.
func TestBreakerIgnoresCallersLeaving(t *testing.T) {
	t.Parallel()
	lim := core.New(silentClient(t), core.WithTimeout(time.Second), core.WithBreaker(time.Millisecond))
	for i := 0; i < 10; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		_, err := lim.Allow(ctx, "k", core.PerHour(1))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, core.ErrTimeout) {
			t.Fatalf("decision %d: %v, want the caller's deadline", i, err)
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if _, err := lim.Allow(ctx, "k", core.PerHour(1)); errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("the breaker opened on callers that left: %v", err)
	}
}

// TestBreakerProbesInBackground: once the breaker is open, no caller's
// decision is a probe: every one fails at once, while the breaker probes
// Redis itself; a failed probe's error is what it answers then; once
// nobody asks, the prober stops; the next decision starts it again, and
// the first probe Redis answers closes the breaker.
func TestBreakerProbesInBackground(t *testing.T) {
	srv := redistest.Standalone(t)
	baseline := takeGoroutines()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	lim := core.New(rdb, core.WithTimeout(20*time.Millisecond), core.WithBreaker(50*time.Millisecond), core.WithLinger(10*time.Millisecond),
		core.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	l := core.PerHour(1_000_000)
	ctx := context.Background()
	// The first decision loads the script, which can take longer than
	// 20 ms on a busy machine.
	for began := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		_, err := lim.Allow(ctx, "k", l)
		if err == nil {
			break
		}
		if time.Since(began) > 5*time.Second {
			t.Fatal(err)
		}
	}
	srv.Stop()
	began := time.Now()
	for !lim.Stats().BreakerOpen {
		if time.Since(began) > 5*time.Second {
			t.Fatal("the breaker did not open within 5 s")
		}
		lim.Allow(ctx, "k", l)
		time.Sleep(time.Millisecond)
	}
	var err error
	for i := 0; i < 200; i++ { // 400 ms: the prober has probed
		if _, err = lim.Allow(ctx, "k", l); !errors.Is(err, core.ErrUnavailable) {
			t.Fatalf("decision %d with the breaker open: %v, want ErrUnavailable at once", i, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if !strings.Contains(err.Error(), "a probe: ") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("the open breaker's error does not name the probe's failure: %v", err)
	}
	// Nobody asks: the prober stops.
	deadline := time.Now().Add(10 * time.Second)
	for proberRuns() {
		if time.Now().After(deadline) {
			t.Fatal("the prober still runs 10 s after the last decision")
		}
		time.Sleep(100 * time.Millisecond)
	}
	srv.Restart(t)
	if _, err := lim.Allow(ctx, "k", l); !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("the first decision after a while: %v, want ErrUnavailable (the breaker is still open)", err)
	}
	for began := time.Now(); lim.Stats().BreakerOpen; time.Sleep(10 * time.Millisecond) {
		if time.Since(began) > 5*time.Second {
			t.Fatal("the breaker did not close within 5 s of Redis's return")
		}
		lim.Allow(ctx, "k", l)
	}
	if _, err := lim.Allow(ctx, "k", l); err != nil {
		t.Fatalf("after the breaker closed: %v", err)
	}
	checkGoroutines(t, lim, baseline)
}

// proberRuns reports whether a breaker's prober goroutine runs.
func proberRuns() bool {
	for _, stack := range takeGoroutines() {
		if strings.Contains(stack, "core.(*breaker).prober") {
			return true
		}
	}
	return false
}
