package redlimit

import (
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
		p.log.ErrorContext(r.Context(), "redlimit: rate limit decision failed", "policy", p.name,
			"failure", p.failure.String(), "error", err, "errors_not_logged", skipped)
	}
}

// reportDryRun logs a request a dry run would have denied: at debug level
// each, and at info level at most once a second per policy, with how many
// there were since.
func (p *Policy) reportDryRun(r *http.Request, res core.Result) {
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
		states[i] = localState(key, t)
		// Get, not Peek: a key that keeps being denied is in use and must
		// not be the first forgotten, or it would start afresh.
		tat, ok := l.tat.Get(states[i])
		if !ok || tat.Before(now) {
			tat = now
		}
		g := newLocalGCRA(t.Limit)
		tats[i] = tat.Add(time.Duration(t.N) * g.interval)
		each[i] = g.result(tat, now) // the state as it stays
		if allowAt := tats[i].Add(-g.span); now.Before(allowAt) {
			allowed = false
			each[i].Allowed, each[i].RetryAfter = false, allowAt.Sub(now)
		}
	}
	if allowed {
		for i, t := range terms {
			l.tat.Add(states[i], tats[i])
			each[i] = newLocalGCRA(t.Limit).result(tats[i], now)
		}
	}
	return core.Binding(each)
}

// localGCRA is a limit's GCRA: events interval apart, the TAT at most span
// ahead of now.
type localGCRA struct {
	limit          core.Limit
	interval, span time.Duration
}

func newLocalGCRA(l core.Limit) localGCRA {
	interval := (l.Period + time.Duration(l.Rate) - 1) / time.Duration(l.Rate)
	return localGCRA{limit: l, interval: interval, span: time.Duration(l.Capacity()) * interval}
}

// result is the allowed result of the state tat at now: what is left, and
// the times until one more and until all of it are back.
func (g localGCRA) result(tat, now time.Time) core.Result {
	res := core.Result{Limit: g.limit, Allowed: true, Remaining: int((g.span - tat.Sub(now)) / g.interval),
		ResetAfter: tat.Sub(now)}
	if capacity := g.limit.Capacity(); res.Remaining < capacity {
		res.NextAfter = res.ResetAfter - time.Duration(capacity-res.Remaining-1)*g.interval
	}
	return res
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
