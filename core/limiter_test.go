package core_test

import (
	"context"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

func TestNewNilClientPanics(t *testing.T) {
	t.Parallel()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "nil redis client") {
			t.Fatalf("New(nil) recovered %v, want a panic naming the nil client", r)
		}
	}()
	core.New(nil)
}

func TestZeroLimiter(t *testing.T) {
	t.Parallel()
	var lim core.Limiter
	if _, err := lim.Allow(context.Background(), "k", core.PerSecond(1)); err == nil || !strings.Contains(err.Error(), "core.New") {
		t.Fatalf("zero Limiter: err %v, want one pointing to core.New", err)
	}
	if err := lim.Reset(context.Background(), "k", core.PerSecond(1)); err == nil {
		t.Fatal("zero Limiter Reset: no error")
	}
}

// TestRedisErrorsAreReturned: a Redis that is gone is an error wrapping the
// client's, never a panic and never a decision.
func TestRedisErrorsAreReturned(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	lim := core.New(rdb)
	m.Close()
	res, err := lim.Allow(context.Background(), "k", core.PerSecond(1))
	if err == nil || res != (core.Result{}) {
		t.Fatalf("Allow with Redis gone: %+v, %v; want a zero Result and an error", res, err)
	}
	if !strings.Contains(err.Error(), `gcra decision for "k"`) {
		t.Fatalf("error %q does not say which decision failed", err)
	}
}
