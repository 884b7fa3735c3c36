package redlimit

import (
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/redlimit/redlimit/core"
)

// Failure says what a Policy does when Redis fails or does not answer
// within the timeout. The error goes to the error handler in every case.
type Failure int

const (
	// FailOpen lets the request through, without rate-limit headers. It is
	// the default: an outage of the limiter is not an outage of the API.
	FailOpen Failure = iota
	// FailClosed answers 503 Service Unavailable with Retry-After.
	FailClosed
	// FailLocal enforces the same Rate, Period and Burst in this process
	// (as GCRA, per instance rather than shared) until Redis answers again.
	// Its memory is bounded by WithLocalKeys.
	FailLocal
)

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

func (p *Policy) reportError(r *http.Request, err error) {
	if p.onError != nil {
		p.onError(r, err)
		return
	}
	if skipped, ok := p.errLog.allow(time.Now()); ok {
		slog.ErrorContext(r.Context(), "redlimit: rate limit decision failed", "policy", p.name,
			"failure", p.failure.String(), "error", err, "errors_not_logged", skipped)
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

// localLimiter is FailLocal's stand-in while Redis is unreachable: GCRA in
// process memory with each limit's Rate, Period and Burst, whatever its
// algorithm, so each instance enforces the limits on its own, all or
// nothing as Redis would. It keeps at most max states (one per key and
// limit) in an LRU (hashicorp/golang-lru's simplelru, under one lock so
// that the limits of one request are decided together).
type localLimiter struct {
	mu  sync.Mutex
	tat *simplelru.LRU[string, time.Time] // theoretical arrival time per key and limit
}

func newLocalLimiter(max int) *localLimiter {
	tat, err := simplelru.NewLRU[string, time.Time](max, nil)
	if err != nil { // only for max < 1, which NewPolicy refuses
		panic(err)
	}
	return &localLimiter{tat: tat}
}

// allow decides the terms for key at now, as the GCRA script would, fills
// each and returns the binding result.
func (l *localLimiter) allow(key string, terms []core.Term, now time.Time, each []core.Result) core.Result {
	var stateBuf [core.MaxTerms]string
	var tatBuf [core.MaxTerms]time.Time
	states, tats := stateBuf[:len(terms)], tatBuf[:len(terms)]
	l.mu.Lock()
	defer l.mu.Unlock()
	allowed := true
	for i, t := range terms {
		interval := (t.Limit.Period + time.Duration(t.Limit.Rate) - 1) / time.Duration(t.Limit.Rate)
		span := time.Duration(t.Limit.Capacity()) * interval
		states[i] = localState(key, t)
		tat, ok := l.tat.Peek(states[i])
		if !ok || tat.Before(now) {
			tat = now
		}
		tats[i] = tat.Add(time.Duration(t.N) * interval)
		each[i] = core.Result{Limit: t.Limit, Allowed: true, Remaining: int((span - tat.Sub(now)) / interval),
			ResetAfter: tat.Sub(now)} // the state as it stays
		if allowAt := tats[i].Add(-span); now.Before(allowAt) {
			allowed = false
			each[i].Allowed, each[i].RetryAfter = false, allowAt.Sub(now)
		}
	}
	if allowed {
		for i, t := range terms {
			l.tat.Add(states[i], tats[i])
			each[i].Remaining -= t.N
			each[i].ResetAfter = tats[i].Sub(now)
		}
	}
	return core.Binding(each)
}

// localState names the state of key under a term: its scope, and what
// tells limits of one key apart in Redis, the algorithm and period.
func localState(key string, t core.Term) string {
	alg := string(t.Limit.Algorithm)
	if alg == "" {
		alg = string(core.GCRA)
	}
	if t.Limit.Stepped {
		alg += ":stepped"
	}
	return t.Scope + "\x00" + alg + "\x00" + strconv.FormatInt(int64(t.Limit.Period), 10) + "\x00" + key
}

// size returns how many states are kept.
func (l *localLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tat.Len()
}
