package core_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestConcurrencyReleaseRetried: two jobs of a "2 concurrent lease=30s"
// limit (with a token bucket in the same reservations) settle while Redis
// is stopped (SIGSTOP): one settlement times out at its 50 ms timeout, the
// other finds the breaker open (ErrUnavailable). Redis resumes after about
// a second. The Limiter frees their slots in the background, so a new
// Reservation of both slots succeeds within a couple of seconds, not the
// 30 s lease; the token bucket is charged the settlements' extra cost at
// most once each (a retry frees slots, it never charges); Stats counts the
// failed settlements and the releases that landed; and the Limiter's
// goroutines go away. Not parallel: it counts goroutines.
func TestConcurrencyReleaseRetried(t *testing.T) {
	srv := redistest.Standalone(t)
	baseline := takeGoroutines()
	ctx := context.Background()
	prefix := uniquePrefix()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	lim := core.New(rdb, core.WithPrefix(prefix), core.WithTimeout(50*time.Millisecond), core.WithLinger(10*time.Millisecond),
		core.WithBreaker(100*time.Millisecond), core.WithLogger(slog.New(slog.DiscardHandler)))
	peek := core.New(srv.Client(t), patient, core.WithPrefix(prefix), core.WithDenyCache(0), core.WithLinger(10*time.Millisecond))
	conc := concLimit(t, "2 concurrent lease=30s")
	bucket := concLimit(t, "100/h token_bucket")
	limits := []core.Limit{conc, bucket}

	// Reserve within the 50 ms timeout, which a machine loaded by the
	// whole suite may miss: a reservation that timed out holds nothing for
	// long (its slot is freed in the background), so try again.
	reserve := func() *core.Reservation {
		for try := 0; ; try++ {
			r, err := lim.Reserve(ctx, "job", limits, 1)
			switch {
			case err == nil:
				return r
			case try == 50 || !errors.Is(err, core.ErrTimeout):
				t.Fatalf("Reserve: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	a := reserve()
	b := reserve()
	if !a.Result().Allowed || !b.Result().Allowed {
		t.Fatalf("a %+v, b %+v: want both admitted", a.Result(), b.Result())
	}

	srv.Pause()
	stopped := time.Now()
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			srv.Resume()
		}
	}
	t.Cleanup(resume)
	// a settles (3 events: 2 more than reserved) while Redis is stopped.
	if err := a.Settle(ctx, 3); !errors.Is(err, core.ErrTimeout) {
		t.Fatalf("a settled while Redis is stopped: %v, want ErrTimeout", err)
	}
	// Other traffic opens the breaker; then b settles, refused at once.
	deadline := time.Now().Add(3 * time.Second)
	for _, err := lim.Allow(ctx, "other", core.PerMinute(100)); !errors.Is(err, core.ErrUnavailable); _, err = lim.Allow(ctx, "other", core.PerMinute(100)) {
		if time.Now().After(deadline) {
			t.Fatalf("the breaker has not opened with Redis stopped: %v", err)
		}
	}
	var wg sync.WaitGroup
	var errB error
	wg.Add(1)
	go func() { defer wg.Done(); errB = b.Settle(ctx, 3) }()
	wg.Wait()
	if !errors.Is(errB, core.ErrUnavailable) {
		t.Fatalf("b settled with the breaker open: %v, want ErrUnavailable", errB)
	}
	time.Sleep(time.Second - time.Since(stopped))
	resume()
	back := time.Now()

	// Both slots are freed soon: a Reservation of both is admitted.
	var res core.Result
	for deadline := back.Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		r := concReserve(t, peek, "job", []core.Limit{conc}, 2)
		if res = r.Result(); res.Allowed {
			release(t, r)
			break
		}
	}
	freed := time.Since(back)
	if !res.Allowed || freed > 2500*time.Millisecond {
		t.Fatalf("2 slots admitted %v after Redis resumed (%+v); want within a couple of seconds, not the %v lease",
			freed, res, conc.Period)
	}
	t.Logf("Redis stopped %v; both slots free %v after it resumed", back.Sub(stopped).Round(time.Millisecond), freed.Round(time.Millisecond))

	// The bucket: 2 reserved, then 2 more for each settlement that ran
	// (a's may have: it reached the stopped server; b's was never sent),
	// never for a retry.
	left, err := peek.AllowN(ctx, "job", bucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	if left.Remaining != 96 && left.Remaining != 98 {
		t.Fatalf("the bucket has %d left; want 98 (no settlement ran) or 96 (a's ran, once): charged twice?", left.Remaining)
	}
	t.Logf("the bucket has %d left of 100", left.Remaining)

	// Stats: two failed settlements; the retried releases landed.
	deadline = time.Now().Add(5 * time.Second)
	st := lim.Stats()
	for (st.RetriedReleases == 0 || st.RetriedReleases+st.AbandonedReleases < st.FailedSettlements) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		st = lim.Stats()
	}
	if st.FailedSettlements != 2 || st.RetriedReleases != 2 || st.AbandonedReleases != 0 {
		t.Fatalf("%+v, want 2 failed settlements, 2 releases retried, none abandoned", st)
	}
	checkGoroutines(t, lim, baseline)
}

// TestConcurrencyReleaseAbandoned: the Limiter stops retrying a release
// when it cannot succeed: Redis stays away until the slots' lease ends
// (the lease frees them), or the key holds another type (WRONGTYPE); the
// retrying goroutine then stops. A settlement of a Reservation without
// slots is counted as failed and never retried.
func TestConcurrencyReleaseAbandoned(t *testing.T) {
	ctx := context.Background()
	quiet := core.WithLogger(slog.New(slog.DiscardHandler))

	t.Run("lease ends", func(t *testing.T) {
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		baseline := takeGoroutines()
		lim := core.New(rdb, core.WithTimeout(time.Second), core.WithBreaker(50*time.Millisecond), quiet, core.WithLinger(10*time.Millisecond))
		limits := []core.Limit{concLimit(t, "1 concurrent lease=400ms"), core.PerHour(10)}
		r := concReserve(t, lim, "k", limits, 1)
		plain := concReserve(t, lim, "k", limits[1:], 1)
		m.Close()
		began := time.Now()
		if err := r.Release(ctx); err == nil {
			t.Fatal("a Release with Redis closed succeeded")
		}
		if err := plain.Settle(ctx, 0); err == nil {
			t.Fatal("a Settle with Redis closed succeeded")
		}
		st := lim.Stats()
		for deadline := time.Now().Add(3 * time.Second); st.AbandonedReleases == 0 && time.Now().Before(deadline); st = lim.Stats() {
			time.Sleep(10 * time.Millisecond)
		}
		if st.FailedSettlements != 2 || st.RetriedReleases != 0 || st.AbandonedReleases != 1 {
			t.Fatalf("%+v, want 2 failed settlements, one release abandoned", st)
		}
		t.Logf("gave up %v after the failure; the lease was 400 ms", time.Since(began)) // within the 3 s above: no timing bound in a unit test
		checkGoroutines(t, lim, baseline)
	})

	t.Run("WRONGTYPE", func(t *testing.T) {
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		prefix := uniquePrefix()
		lim := core.New(rdb, patient, core.WithPrefix(prefix), quiet)
		l := concLimit(t, "1 concurrent lease=1m")
		r := concReserve(t, lim, "k", []core.Limit{l}, 1)
		key := stateKey(prefix, "k", l)
		if err := rdb.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, key, "a string", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.Release(ctx); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("a Release on a key of another type: %v, want WRONGTYPE", err)
		}
		if st := lim.Stats(); st.FailedSettlements != 1 || st.RetriedReleases != 0 || st.AbandonedReleases != 1 {
			t.Fatalf("%+v, want 1 failed settlement, its release abandoned at once", st)
		}
	})
}
