package core

import "time"

// WithLocalClock sets the clock the deny cache reads when the scripts read
// the Redis server's, for tests whose server clock is fake (miniredis's
// SetTime): in production both run in real time.
func WithLocalClock(now func() time.Time) Option {
	return func(l *Limiter) { l.localClock = now }
}

// Senders returns how many sender goroutines the Limiter runs now.
func (l *Limiter) Senders() int {
	l.engine.mu.Lock()
	defer l.engine.mu.Unlock()
	return l.engine.alive
}

// DenyCacheLen returns how many keys the deny cache holds.
func (l *Limiter) DenyCacheLen() int {
	if l.deny == nil {
		return 0
	}
	return l.deny.entries.Len()
}

// SetLinger changes how long the Limiter's idle senders wait before they
// stop, so tests of goroutine counts need not wait a second.
func (l *Limiter) SetLinger(d time.Duration) {
	l.engine.mu.Lock()
	defer l.engine.mu.Unlock()
	l.engine.linger = d
}

// Script returns the decision script of l and the ARGV it takes for a cost
// of 1 on the server's clock, for benchmarks of the scripts alone.
func Script(l Limit) (src, sha string, argv []any) {
	var c limitCache
	info, err := c.get(l)
	if err != nil {
		panic(err)
	}
	return info.d.script.src, info.d.script.sha, append([]any{"", 1}, info.args...)
}

// MixedScript returns the script that decides any mix of algorithms.
func MixedScript() (src, sha string) { return mixedScript.src, mixedScript.sha }

// BatchScript returns the script that makes several decisions in one call.
func BatchScript() (src, sha string) { return batchScript.src, batchScript.sha }

// Queued returns how many decisions wait for a sender.
func (l *Limiter) Queued() int {
	l.engine.mu.Lock()
	defer l.engine.mu.Unlock()
	return len(l.engine.queue)
}
