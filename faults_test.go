package redlimit_test

import (
	"errors"
	"io"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestDeadRedisCostsNothing: with Redis refusing connections (killed) and
// the breaker open, no request through a policy waits on Redis: the
// breaker's probes are its own, in the background, while go-redis's
// default client retries a refused dial for half a second. The error each
// request observes names the cause the client saw, "connection refused".
func TestDeadRedisCostsNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr}) // go-redis's defaults
	t.Cleanup(func() { rdb.Close() })
	// A patient timeout: the first decision, on a Redis that is up, must
	// not fail for want of CPU; those after Stop are refused at once
	// whatever the timeout.
	lim := core.New(rdb, core.WithTimeout(10*time.Second), core.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	p := mustPolicy(t, lim, core.PerMinute(1000))
	if d, _ := decide(p, "192.0.2.1:1"); d.Outcome != redlimit.OutcomeAllowed {
		t.Fatalf("Redis up: %+v", d)
	}
	srv.Stop()
	var open time.Time
	var took []time.Duration
	var last error
	for began := time.Now(); time.Since(began) < 3*time.Second && len(took) < 1000; {
		start := time.Now()
		d, _ := decide(p, "192.0.2.1:1")
		if open.IsZero() {
			if errors.Is(d.Err, core.ErrUnavailable) {
				open = start
			}
			continue
		}
		took = append(took, time.Since(start))
		last = d.Err
		if !errors.Is(d.Err, core.ErrUnavailable) || !d.Allowed() {
			t.Fatalf("with the breaker open: %+v, want a fail-open pass with ErrUnavailable", d)
		}
		time.Sleep(time.Millisecond)
	}
	if open.IsZero() || len(took) < 100 {
		t.Fatalf("the breaker did not open (or too late): %d requests after it opened", len(took))
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	longest, p99 := took[len(took)-1], took[len(took)*99/100]
	t.Logf("%d requests with Redis dead and the breaker open: median %v, 99th percentile %v, longest %v; the last error: %v",
		len(took), took[len(took)/2], p99, longest, last)
	// 5 ms is what the issue asks; the bound leaves room for a loaded
	// machine under the race detector, and the log says what it was. The
	// 99th percentile, not the longest: one request in a hundred may meet
	// a stall of the process itself (a GC, a descheduled thread), which
	// is not a wait on Redis; ErrUnavailable on every one above says that
	// none went to Redis.
	if p99 > 25*time.Millisecond {
		t.Errorf("the 99th percentile took %v with the breaker open; none should wait on Redis", p99)
	}
	if !strings.Contains(last.Error(), "connection refused") {
		t.Errorf("the error does not name the cause the client saw (connection refused): %v", last)
	}
}
