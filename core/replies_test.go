package core_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
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
			time.Sleep(100 * time.Millisecond) // past the threshold: others are answered BUSY
			return srv.Client(t), func() {
				for i := 0; i < 100; i++ {
					if admin.ScriptKill(ctx).Err() == nil {
						break
					}
					time.Sleep(10 * time.Millisecond)
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
			rdb, undo := tc.setup(t, srv)
			lim := core.New(rdb, core.WithPrefix(prefix), core.WithBreaker(200*time.Millisecond),
				core.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			var err error
			began := time.Now()
			for i := 0; time.Since(began) < 400*time.Millisecond; i++ {
				start := time.Now()
				_, err = lim.Allow(ctx, "k", core.PerHour(100))
				took := time.Since(start)
				if err == nil || errors.Is(err, core.ErrTimeout) || !strings.Contains(err.Error(), tc.code) {
					t.Fatalf("decision %d: %v, want Redis's %s reply", i, err, tc.code)
				}
				if took > core.DefaultTimeout/2 {
					t.Fatalf("decision %d took %v; an error reply comes back at once", i, took)
				}
				if errors.Is(err, core.ErrUnavailable) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if !errors.Is(err, core.ErrUnavailable) {
				t.Fatalf("after 400 ms of %s replies the breaker is not open: %v", tc.code, err)
			}
			undo()
			res, err := peek.AllowN(ctx, "k", core.PerHour(100), 0)
			if err != nil || res.Remaining != 99 {
				t.Fatalf("after the refusals: %+v, %v; want 99 left, nothing counted", res, err)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
