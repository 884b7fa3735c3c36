package retryafter_test

import (
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/retryafter"
)

func TestWait(t *testing.T) {
	t.Parallel()
	perMinute := core.PerMinute(10)
	for _, c := range []struct {
		res  core.Result
		want time.Duration
	}{
		{core.Result{Limit: perMinute, RetryAfter: 1500 * time.Millisecond}, 1500 * time.Millisecond},
		{core.Result{Limit: perMinute, RetryAfter: core.InfDuration}, time.Minute},
		{core.Result{Limit: perMinute, RetryAfter: core.InfDuration, ResetAfter: 20 * time.Second}, time.Minute},
		{core.Result{Limit: perMinute, Allowed: true}, 0},
	} {
		if got := retryafter.Wait(c.res); got != c.want {
			t.Errorf("Wait(%+v) = %v, want %v", c.res, got, c.want)
		}
	}
}

func TestSeconds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d            time.Duration
		secs, delays int64
	}{
		{-time.Second, 0, 1},
		{0, 0, 1},
		{time.Nanosecond, 1, 1},
		{time.Second, 1, 1},
		{time.Second + time.Nanosecond, 2, 2},
		{time.Hour, 3600, 3600},
		{core.InfDuration - 1, 9223372036, 9223372036}, // saturates, never wraps
	} {
		if got := retryafter.Seconds(c.d); got != c.secs {
			t.Errorf("Seconds(%v) = %d, want %d", c.d, got, c.secs)
		}
		if got := retryafter.Delay(c.d); got != c.delays {
			t.Errorf("Delay(%v) = %d, want %d", c.d, got, c.delays)
		}
	}
}
