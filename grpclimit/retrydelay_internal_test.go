package grpclimit

import (
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// TestRetryDelay: a denial's RetryInfo is the wait the policy chose
// (redlimit.RetryAfter, jitter included: Decision.RetryAfter) to the
// millisecond, rounded up; a call that can never pass (RetryAfter
// InfDuration: its cost is above what the limit holds, as under
// FailLocal's share of a burst) waits the limit's period, not 292 years.
func TestRetryDelay(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		res  core.Result
		want time.Duration
	}{
		{core.Result{Limit: core.PerMinute(10), RetryAfter: core.InfDuration}, time.Minute},
		{core.Result{Limit: core.PerMinute(10), RetryAfter: 5500 * time.Microsecond}, 6 * time.Millisecond},
		{core.Result{Limit: core.PerMinute(10), RetryAfter: 2 * time.Second}, 2 * time.Second},
	} {
		d := redlimit.Decision{Result: c.res, RetryAfter: redlimit.RetryAfter(c.res, 0)}
		if got := retryDelay(d); got != c.want {
			t.Errorf("retryDelay(RetryAfter %v) = %v, want %v", c.res.RetryAfter, got, c.want)
		}
	}
}
