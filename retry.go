package redlimit

import (
	"math/rand/v2"
	"time"

	"github.com/redlimit/redlimit/core"
)

// The rules every answer to a denied request follows, whatever its
// protocol: how long it should wait (RetryAfter), and how a time becomes
// the whole seconds of a rate-limit field (Seconds). HTTP's Retry-After
// and X-RateLimit-Reset, the draft's RateLimit t, gRPC's RetryInfo and
// envoyrls's answers are computed here and nowhere else.

// RetryAfter returns how long a request denied with res should wait before
// it tries again: res.RetryAfter, or, for a request that can never pass
// (core.InfDuration: its cost is above its limit's burst), its limit's
// Period; plus up to jitter more, chosen at random (WithRetryAfterJitter:
// clients denied together do not all come back at once), none when jitter
// is 0 or less. A Decision's RetryAfter is it.
func RetryAfter(res core.Result, jitter time.Duration) time.Duration {
	d := res.RetryAfter
	if d == core.InfDuration {
		d = res.Limit.Period
	}
	if jitter > 0 && d < core.InfDuration-jitter {
		d += rand.N(jitter)
	}
	return d
}

// Seconds returns d in whole seconds, rounded up, as the rate-limit fields
// carry times: 0 for d of 0 or less, saturating at core.InfDuration's.
// Retry-After is at least 1: max(1, Seconds(d)).
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if d > core.InfDuration-time.Second {
		return int64(core.InfDuration / time.Second)
	}
	return int64((d + time.Second - 1) / time.Second)
}

// retryAfterSeconds is a Retry-After field's value for a wait of d.
func retryAfterSeconds(d time.Duration) int64 { return max(1, Seconds(d)) }
