package redlimit

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/core"
)

// Failure says what a policy does when Redis fails or does not answer
// within the Limiter's timeout. The error is logged (at most one line a
// second per policy) and observed as Decision.Err in every case.
type Failure int

const (
	// FailOpen lets the request through, without rate-limit headers. It is
	// the default: an outage of the limiter is not an outage of the API.
	FailOpen Failure = iota
	// FailClosed answers 503 Service Unavailable with Retry-After.
	FailClosed
	// FailLocal enforces the same limits in this process until Redis
	// answers again, each as GCRA with its Rate, Period and Burst, per
	// instance rather than shared. It keeps at most 10 000 states (a key
	// under one limit) per policy, forgetting the least recently used.
	FailLocal
)

// localKeys bounds the states FailLocal keeps per policy.
const localKeys = 10_000

// String returns the policy's name: "fail-open", "fail-closed" or
// "fail-local".
func (f Failure) String() string {
	switch f {
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	case FailLocal:
		return "fail-local"
	}
	return "Failure(" + strconv.Itoa(int(f)) + ")"
}

// reportError logs a Redis error of r at error level, at most once a
// second per policy, with how many it left out.
func (p *policy) reportError(r *http.Request, err error) {
	if skipped, ok := p.errLog.allow(time.Now()); ok {
		p.log.ErrorContext(r.Context(), "redlimit: rate limit decision failed", "policy", p.name,
			"failure", p.failure.String(), "error", err, "errors_not_logged", skipped)
	}
}

// reportDryRun logs a request a dry run would have denied: at debug level
// each, and at info level at most once a second per policy, with how many
// there were since.
func (p *policy) reportDryRun(r *http.Request, res core.Result) {
	p.log.DebugContext(r.Context(), "redlimit: dry run: would deny", "policy", p.name,
		"limit", res.Limit.String(), "retry_after", res.RetryAfter)
	if skipped, ok := p.dryLog.allow(time.Now()); ok {
		p.log.InfoContext(r.Context(), "redlimit: dry run: requests would have been denied", "policy", p.name,
			"limit", res.Limit.String(), "count", skipped+1)
	}
}

// throttle lets one event through per second and counts the rest.
type throttle struct {
	last    atomic.Int64 // unix nanoseconds of the last event let through
	skipped atomic.Int64
}

// allow reports whether to log now, and how many events were held back
// since the last one.
func (t *throttle) allow(now time.Time) (skipped int64, ok bool) {
	last := t.last.Load()
	if now.UnixNano()-last < int64(time.Second) || !t.last.CompareAndSwap(last, now.UnixNano()) {
		t.skipped.Add(1)
		return 0, false
	}
	return t.skipped.Swap(0), true
}
