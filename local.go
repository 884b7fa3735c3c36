package redlimit

import (
	"sync"
	"time"

	"github.com/redlimit/redlimit/core"
)

// localLimiter is FailLocal's stand-in while Redis is unreachable: GCRA in
// process memory with the limit's Rate, Period and Burst, whatever the
// limit's algorithm, so each instance enforces the limit on its own. It
// keeps at most max keys.
type localLimiter struct {
	limit          core.Limit
	interval, span time.Duration // between events; how far ahead the TAT may run
	max            int

	mu  sync.Mutex
	tat map[string]time.Time // theoretical arrival time per key
}

func newLocalLimiter(l core.Limit, max int) *localLimiter {
	interval := (l.Period + time.Duration(l.Rate) - 1) / time.Duration(l.Rate)
	return &localLimiter{limit: l, interval: interval, span: time.Duration(l.Capacity()) * interval,
		max: max, tat: make(map[string]time.Time)}
}

// allow decides n events for key at now, as the GCRA script does.
func (l *localLimiter) allow(key string, now time.Time, n int) core.Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	tat, ok := l.tat[key]
	if !ok || tat.Before(now) {
		tat = now
	}
	newTAT := tat.Add(time.Duration(n) * l.interval)
	if allowAt := newTAT.Add(-l.span); now.Before(allowAt) {
		return core.Result{
			Limit:      l.limit,
			Remaining:  int((l.span - tat.Sub(now)) / l.interval),
			RetryAfter: allowAt.Sub(now),
			ResetAfter: tat.Sub(now),
		}
	}
	if !ok && len(l.tat) >= l.max {
		l.evict(now)
	}
	l.tat[key] = newTAT
	return core.Result{
		Limit:      l.limit,
		Allowed:    true,
		Remaining:  int((l.span - newTAT.Sub(now)) / l.interval),
		ResetAfter: newTAT.Sub(now),
	}
}

// evict forgets one key, preferring one whose state has expired among the
// first few the map's random iteration offers.
func (l *localLimiter) evict(now time.Time) {
	var victim string
	seen := 0
	for k, tat := range l.tat {
		victim = k
		if !tat.After(now) || seen == 8 {
			break
		}
		seen++
	}
	delete(l.tat, victim)
}

// size returns how many keys are tracked.
func (l *localLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.tat)
}
