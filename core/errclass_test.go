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

// TestBreakerIgnoresRequestErrors: decisions that fail because of what
// they ask (a key that holds another type: WRONGTYPE; a calendar window
// the Redis clock is outside of) are answered by Redis, so they never open
// the breaker, however many fail and for however long: one at a time and
// batched, on miniredis and on redis-server, decisions on other keys still
// reach Redis, never ErrUnavailable, and Stats shows no opening.
func TestBreakerIgnoresRequestErrors(t *testing.T) {
	t.Parallel()
	type server struct {
		client func(t *testing.T) redis.UniversalClient
		skew   func(t *testing.T) // puts the server's clock 40 days back, if it can
	}
	servers := map[string]func(t *testing.T) server{
		"miniredis": func(t *testing.T) server {
			m := miniredis.RunT(t)
			return server{
				client: func(t *testing.T) redis.UniversalClient {
					c := redis.NewClient(&redis.Options{Addr: m.Addr()})
					t.Cleanup(func() { c.Close() })
					return c
				},
				skew: func(*testing.T) { m.SetTime(time.Now().Add(-40 * 24 * time.Hour)) },
			}
		},
		"standalone": func(t *testing.T) server {
			srv := redistest.Standalone(t)
			return server{client: func(t *testing.T) redis.UniversalClient { return srv.Client(t) }}
		},
	}
	for name, start := range servers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := start(t)
			rdb := s.client(t)
			ctx := context.Background()
			prefix := uniquePrefix()
			lim := core.New(rdb, patient, core.WithPrefix(prefix), core.WithBreaker(20*time.Millisecond),
				core.WithDenyCache(0), core.WithLogger(slog.New(slog.DiscardHandler)))
			gcra := core.Limit{Algorithm: core.GCRA, Rate: 100, Period: time.Minute}
			if err := rdb.RPush(ctx, stateKey(prefix, "bad", gcra), "a list").Err(); err != nil {
				t.Fatal(err)
			}
			wrongType := func(err error) error {
				if err == nil || errors.Is(err, core.ErrUnavailable) || !strings.Contains(err.Error(), "WRONGTYPE") {
					return errors.New("want a WRONGTYPE error")
				}
				return nil
			}
			// fail makes decisions that fail with want, one at a time and
			// then from 8 goroutines at once (batched), for at least 10
			// breaker periods and 30 decisions each way, at most 5 s.
			fail := func(what string, decide func() error, want func(error) error) {
				t.Helper()
				for _, goroutines := range []int{1, 8} {
					var wg sync.WaitGroup
					errs := make(chan error, goroutines)
					began := time.Now()
					for g := 0; g < goroutines; g++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for i := 0; (i < 30 || time.Since(began) < 200*time.Millisecond) && time.Since(began) < 5*time.Second; i++ {
								if err := decide(); want(err) != nil {
									errs <- errors.New(what + ": " + want(err).Error() + ", got: " + errString(err))
									return
								}
							}
						}()
					}
					wg.Wait()
					close(errs)
					for err := range errs {
						t.Fatal(err)
					}
					if st := lim.Stats(); st.BreakerOpen || st.BreakerOpens != 0 {
						t.Fatalf("%s from %d goroutines: %+v, want the breaker never opened", what, goroutines, st)
					}
					// Everything else is served: from Redis, not ErrUnavailable.
					if _, err := lim.Allow(ctx, "good", gcra); err != nil {
						t.Fatalf("%s from %d goroutines: another key: %v, want an answer", what, goroutines, err)
					}
				}
			}
			fail("WRONGTYPE", func() error { _, err := lim.Allow(ctx, "bad", gcra); return err }, wrongType)
			if s.skew == nil {
				return
			}
			s.skew(t)
			cal := concLimit(t, "5/d calendar")
			fail("calendar", func() error { _, err := lim.Allow(ctx, "cal", cal); return err }, func(err error) error {
				if err == nil || errors.Is(err, core.ErrUnavailable) || !strings.Contains(err.Error(), "calendar windows") {
					return errors.New("want the calendar windows' error")
				}
				return nil
			})
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// TestBreakerCountsBusy: an error reply that says the server cannot run
// scripts now (BUSY: another script runs past busy-reply-threshold) is
// Redis failing, not the request: it opens the breaker, and decisions then
// fail at once with ErrUnavailable.
func TestBreakerCountsBusy(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	admin := srv.Client(t)
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "busy-reply-threshold", "20").Err(); err != nil {
		t.Fatal(err)
	}
	lim := core.New(srv.Client(t), core.WithPrefix(uniquePrefix()), core.WithTimeout(time.Second),
		core.WithBreaker(50*time.Millisecond), core.WithLogger(slog.New(slog.DiscardHandler)))
	if _, err := lim.Allow(ctx, "k", core.PerMinute(100)); err != nil { // load the script first
		t.Fatal(err)
	}
	busy := make(chan error, 1)
	go func() { // runs until SCRIPT KILL, which a later step sends
		busy <- srv.Client(t).Eval(ctx, "local i = 0 while true do i = i + 1 end", nil).Err()
	}()
	t.Cleanup(func() {
		for admin.ScriptKill(ctx).Err() != nil && len(busy) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		<-busy
	})
	var err error
	sawBusy := false
	deadline := time.Now().Add(5 * time.Second)
	for !errors.Is(err, core.ErrUnavailable) && time.Now().Before(deadline) {
		_, err = lim.Allow(ctx, "k", core.PerMinute(100))
		sawBusy = sawBusy || (err != nil && strings.Contains(err.Error(), "BUSY"))
		time.Sleep(5 * time.Millisecond)
	}
	if !errors.Is(err, core.ErrUnavailable) || !sawBusy {
		t.Fatalf("with a script running past its time: %v (BUSY seen: %v), want BUSY errors, then ErrUnavailable", err, sawBusy)
	}
	if st := lim.Stats(); !st.BreakerOpen || st.BreakerOpens != 1 {
		t.Fatalf("%+v, want the breaker open, once", st)
	}
}
