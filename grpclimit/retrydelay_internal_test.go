package grpclimit

import (
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// TestRetryDelayNeverInfinite: a call that can never pass (RetryAfter
// InfDuration: its cost is above what the limit holds, as under
// FailLocal's share of a burst) gets a RetryInfo of the limit's period,
// as its retry-after says, not of 292 years.
func TestRetryDelayNeverInfinite(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		res  core.Result
		md   metadata.MD
		want time.Duration
	}{
		{core.Result{Limit: core.PerMinute(10), RetryAfter: core.InfDuration}, metadata.Pairs("retry-after", "60"), time.Minute},
		{core.Result{Limit: core.PerMinute(10), RetryAfter: core.InfDuration}, nil, time.Minute},
		{core.Result{Limit: core.PerMinute(10), RetryAfter: 5500 * time.Microsecond}, metadata.Pairs("retry-after", "1"), 6 * time.Millisecond},
		{core.Result{Limit: core.PerMinute(10), RetryAfter: 2 * time.Second}, metadata.Pairs("retry-after", "4"), 4 * time.Second}, // jitter
	} {
		if got := retryDelay(redlimit.Decision{Result: c.res}, c.md); got != c.want {
			t.Errorf("retryDelay(RetryAfter %v, %v) = %v, want %v", c.res.RetryAfter, c.md, got, c.want)
		}
	}
}
