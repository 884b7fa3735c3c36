package redlimit

import (
	"strconv"
	"sync/atomic"
	"time"
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
	// answers again, each as GCRA with its Rate, Period and Burst divided
	// by the number of instances that shared the Limiter's keys when Redis
	// last answered (counted by a heartbeat in Redis, at most once a
	// second per Limiter, once a FailLocal policy uses it; 1 when
	// unknown), so that the instances together admit about the limit
	// (docs/faults.md gives the bound). It keeps at most 10 000 states (a
	// key under one limit) per policy, forgetting the least recently used.
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
