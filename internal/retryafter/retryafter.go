// Package retryafter turns a decision's times into the whole seconds the
// rate-limit fields carry: the one place that does, for the root package's
// answers (HTTP headers, gRPC metadata) and envoyrls's.
package retryafter

import (
	"time"

	"github.com/redlimit/redlimit/core"
)

// Wait returns how long a denial tells its client to wait: res.RetryAfter,
// or, for a request that can never pass (RetryAfter core.InfDuration: its
// cost is above the limit's capacity), the limit's Period, by which the
// whole allowance has come back, never a wait of centuries. A retry then
// is denied again; the wait only keeps a client from retrying at once.
func Wait(res core.Result) time.Duration {
	if res.RetryAfter == core.InfDuration {
		return res.Limit.Period
	}
	return res.RetryAfter
}

// Delay returns the delay-seconds of a Retry-After field that asks to
// wait d: whole seconds, rounded up, at least 1.
func Delay(d time.Duration) int64 { return max(1, Seconds(d)) }

// Seconds rounds d up to whole seconds: 0 for d <= 0, and no overflow
// near the largest Duration.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if d > core.InfDuration-time.Second {
		return int64(core.InfDuration / time.Second)
	}
	return int64((d + time.Second - 1) / time.Second)
}
