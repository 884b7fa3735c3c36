package redlimit

import (
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
	// answers again, each as GCRA with its Rate, Period and Burst divided
	// by the number of instances that shared the Limiter's keys when Redis
	// last answered (counted by a heartbeat in Redis, at most once a
	// second per Limiter, once a FailLocal policy uses it; 1 when
	// unknown), so that the instances together admit about the limit
	// (docs/faults.md gives the bound). A limit admits the outage's share
	// of it, not a fresh period: one that refills within a minute starts
	// full, a longer one (a quota by the day or the month) with a minute's
	// share (core.Local). It keeps at most 10 000 states (a key under one
	// limit) per policy, forgetting the least recently used.
	FailLocal
)

// WithLimitFailure sets the failure policy of each limit: what becomes
// of a request under limit l when Redis fails is failure(l), in place of
// WithFailure's, for the policy's own limits, WithAlso's, those a request
// picks, a budget's and a rule's alike. A request with a limit that fails
// closed is answered 503 (FailClosed), whatever its other limits; else its
// limits that fail locally are decided in process (FailLocal), and a
// request they deny is answered 429; its limits that fail open are not
// enforced until Redis answers, and a request whose limits all fail open
// passes (FailOpen). So a rate can hold in process while a quota sold by
// the month fails closed, or open. A value failure returns that is not
// one of the Failure constants is read as WithFailure's; a dry run passes
// whatever it says. failure is called only when Redis fails, once for
// each limit of the request, and must be safe for concurrent use. The
// default, and nil, is WithFailure's for every limit. With it, the
// Limiter counts its instances as under FailLocal (core.Limiter.Local).
func WithLimitFailure(failure func(l core.Limit) Failure) Option {
	return func(c *options) { c.Rest.limitFailure = failure }
}

// fallsBack reports whether c may decide a request in process when Redis
// fails (FailLocal, or a limit's, WithLimitFailure).
func (c *config) fallsBack() bool { return c.failure == FailLocal || c.limitFailure != nil }

// failureOf returns what becomes of a request whose decision ask failed:
// the policy's Failure, or with WithLimitFailure, FailClosed if a limit
// of ask fails closed, else FailLocal if one fails locally, else FailOpen.
func (p *policy) failureOf(ask *core.Request) Failure {
	if p.limitFailure == nil {
		return p.failure
	}
	f := FailOpen
	for _, l := range ask.Limits {
		switch p.limitFailed(l) {
		case FailClosed:
			return FailClosed
		case FailLocal:
			f = FailLocal
		}
	}
	return f
}

// limitFailed returns WithLimitFailure's Failure of l, the policy's when
// it is not one.
func (p *policy) limitFailed(l core.Limit) Failure {
	if f := p.limitFailure(l); f >= FailOpen && f <= FailLocal {
		return f
	}
	return p.failure
}

// fallback decides ask in process, as FailLocal does: every limit of it,
// or with WithLimitFailure those that fail locally, the others (failing
// open) reported allowed with their whole capacity, and never binding.
// ask.Each receives every limit's result.
func (p *policy) fallback(ask *core.Request) core.Decision {
	if p.limitFailure == nil {
		return p.local.Decide(ask)
	}
	var (
		at     [core.MaxLimits]int // the index in ask of each limit decided
		limits [core.MaxLimits]core.Limit
		scopes [core.MaxLimits]string
		costs  [core.MaxLimits]int
		rest   [core.MaxLimits]bool
		each   [core.MaxLimits]core.Result
	)
	k := 0
	for i, l := range ask.Limits {
		if p.limitFailed(l) != FailLocal {
			ask.Each[i] = core.Result{Limit: l, Allowed: true, Remaining: l.Capacity()}
			continue
		}
		at[k], limits[k], scopes[k] = i, l, ask.Scopes[i]
		if ask.Costs != nil {
			costs[k] = ask.Costs[i]
		}
		if ask.TakeRest != nil {
			rest[k] = ask.TakeRest[i]
		}
		k++
	}
	local := core.Request{Key: ask.Key, N: ask.N, Limits: limits[:k], Scopes: scopes[:k], Each: each[:k]}
	if ask.Costs != nil {
		local.Costs = costs[:k]
	}
	if ask.TakeRest != nil {
		local.TakeRest = rest[:k]
	}
	dec := p.local.Decide(&local)
	for j := range k {
		ask.Each[at[j]] = each[j]
	}
	dec.Binding = at[dec.Binding]
	return dec
}

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
