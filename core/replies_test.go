package core_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestErrorRepliesNameTheirCause: a Redis that refuses a decision with an
// error reply (out of memory, a user without the permission, a script
// busy) fails it at once, with Redis's own words, never a timeout; once
// they have gone on for the breaker's span, the open breaker says so too.
// Nothing is counted.
//
// "At once" is shown by what reached Redis, not by a clock: each decision
// is one EVALSHA, never sent again nor waited on until its timeout (the
// server's own count of them equals the decisions that were not failed
// fast), and ends with Redis's error, not ErrTimeout, well within a
// timeout of 10 s. (It was a bound of 50 ms per decision, which a loaded
// machine overran: a BUSY server, busy with a script on one of 2 cores,
// answered after more than 100 ms.)
func TestErrorRepliesNameTheirCause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		code  string
		setup func(t *testing.T, srv *redistest.Server) (rdb *redis.Client, undo func())
	}{
		{"OOM", func(t *testing.T, srv *redistest.Server) (*redis.Client, func()) {
			admin := srv.Client(t)
			must(t, admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
			must(t, admin.ConfigSet(ctx, "maxmemory", "1").Err())
			return srv.Client(t), func() { must(t, admin.ConfigSet(ctx, "maxmemory", "0").Err()) }
		}},
		{"NOPERM", func(t *testing.T, srv *redistest.Server) (*redis.Client, func()) {
			admin := srv.Client(t)
			must(t, admin.Do(ctx, "ACL", "SETUSER", "noscripts", "on", ">secret", "~*", "+@all", "-evalsha", "-eval").Err())
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "noscripts", Password: "secret"})
			t.Cleanup(func() { rdb.Close() })
			return rdb, func() { must(t, admin.Do(ctx, "ACL", "SETUSER", "noscripts", "+@all").Err()) }
		}},
		{"BUSY", func(t *testing.T, srv *redistest.Server) (*redis.Client, func()) {
			admin := srv.Client(t)
			must(t, admin.ConfigSet(ctx, "busy-reply-threshold", "20").Err())
			// A script of its own connection that runs until killed.
			busy := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ReadTimeout: 20 * time.Second})
			t.Cleanup(func() { busy.Close() })
			done := make(chan struct{})
			go func() {
				defer close(done)
				busy.Eval(ctx, "while true do end", nil)
			}()
			// Once the script has run past the threshold, others are
			// answered BUSY; wait for that, however long the script takes
			// to start on a busy machine.
			probe := srv.Client(t)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				err := probe.Eval(ctx, "return 1", nil).Err()
				if err != nil && strings.Contains(err.Error(), "BUSY") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("10 s after the script started, the server answers %v, not BUSY", err)
				}
			}
			return srv.Client(t), func() {
				for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
					if admin.ScriptKill(ctx).Err() == nil {
						break
					}
				}
				<-done
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Standalone(t)
			prefix := uniquePrefix()
			peek := core.New(srv.Client(t), core.WithPrefix(prefix), patient)
			if _, err := peek.Allow(ctx, "k", core.PerHour(100)); err != nil { // the script is loaded
				t.Fatal(err)
			}
			before := evalshas(t, srv)
			rdb, undo := tc.setup(t, srv)
			const timeout = 10 * time.Second
			lim := core.New(rdb, core.WithPrefix(prefix), core.WithBreaker(200*time.Millisecond), core.WithTimeout(timeout),
				core.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			var err error
			sent := 0 // decisions that reached Redis: all but the one the open breaker fails fast
			began := time.Now()
			for i := 0; time.Since(began) < timeout; i++ {
				start := time.Now()
				_, err = lim.Allow(ctx, "k", core.PerHour(100))
				took := time.Since(start)
				if err == nil || errors.Is(err, core.ErrTimeout) || !strings.Contains(err.Error(), tc.code) {
					t.Fatalf("decision %d: %v, want Redis's %s reply", i, err, tc.code)
				}
				if took > timeout/2 {
					t.Fatalf("decision %d took %v; an error reply comes back at once, not at the timeout (%v)", i, took, timeout)
				}
				if errors.Is(err, core.ErrUnavailable) {
					break
				}
				sent++
				time.Sleep(5 * time.Millisecond)
			}
			if !errors.Is(err, core.ErrUnavailable) {
				t.Fatalf("after %v of %s replies the breaker is not open: %v", timeout, tc.code, err)
			}
			opened := time.Since(began)
			undo()
			got := evalshas(t, srv) - before
			t.Logf("%d decisions answered %s, then the breaker opened after %v; Redis received %d EVALSHA", sent, tc.code, opened, got)
			if got != sent {
				t.Errorf("Redis received %d EVALSHA for %d decisions; want one each: an error reply is not sent again", got, sent)
			}
			res, err := peek.AllowN(ctx, "k", core.PerHour(100), 0)
			if err != nil || res.Remaining != 99 {
				t.Fatalf("after the refusals: %+v, %v; want 99 left, nothing counted", res, err)
			}
		})
	}
}

// evalshas returns how many EVALSHA commands srv has received: run
// (calls, including those that failed) or refused before running
// (rejected_calls: BUSY, NOPERM), from INFO commandstats.
func evalshas(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	info, err := srv.Client(t).Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		fields, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		n := 0
		for _, f := range strings.Split(fields, ",") {
			name, value, _ := strings.Cut(f, "=")
			if name == "calls" || name == "rejected_calls" {
				v, err := strconv.Atoi(value)
				if err != nil {
					t.Fatalf("INFO commandstats: %q", line)
				}
				n += v
			}
		}
		return n
	}
	return 0 // none yet
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
