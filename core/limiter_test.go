package core_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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

func TestCapacity(t *testing.T) {
	t.Parallel()
	if got := core.PerMinute(7).Capacity(); got != 7 {
		t.Errorf("Capacity of 7/m = %d, want the rate", got)
	}
	if got := (core.Limit{Rate: 7, Period: time.Minute, Burst: 20}).Capacity(); got != 20 {
		t.Errorf("Capacity with Burst 20 = %d, want the burst", got)
	}
}

// TestPrefixAndClockDefaults: WithPrefix("") writes keys with no prefix,
// and WithClock(nil) restores the Redis clock.
func TestPrefixAndClockDefaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := miniredis.RunT(t)
	m.SetTime(t0)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })

	far := t0.Add(24 * time.Hour) // a client clock a day ahead of Redis's
	lim := core.New(rdb, core.WithPrefix(""), core.WithClock(func() time.Time { return far }), core.WithClock(nil))
	res, err := lim.Allow(ctx, "k", core.PerHour(1))
	if err != nil || !res.Allowed {
		t.Fatalf("Allow: %+v, %v", res, err)
	}
	if !m.Exists("{k}:gcra:1h") {
		t.Fatalf("no key {k}:gcra:1h with an empty prefix; keys: %v", m.Keys())
	}
	// The state is on Redis's clock: the theoretical arrival time is an
	// hour after t0, not after the client clock that WithClock(nil) undid.
	got, _ := m.Get("{k}:gcra:1h")
	if want := fmt.Sprint(t0.Add(time.Hour).UnixMicro()); got != want {
		t.Fatalf("stored TAT %s, want %s (t0 + 1h)", got, want)
	}
}
