package core

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Breaker settings.
const (
	defaultBreakerAfter  = 500 * time.Millisecond // how long decisions must fail before it opens (WithBreaker)
	breakerMinFailures   = 3                      // failed decisions in a row, at least, that open it
	breakerProbeInterval = 250 * time.Millisecond // how often an open breaker lets a probe through
)

// breaker fails decisions fast while Redis keeps failing. It opens once
// decisions have failed (an error or a timeout) for `after` with no success
// in between, and at least breakerMinFailures of them. While open, every
// decision fails at once with ErrUnavailable, except one probe every
// breakerProbeInterval, which is sent as usual; the first success closes
// it. A caller's own context ending is not Redis's failure and counts for
// nothing. Time is the process's clock, not the Limiter's: the breaker is
// about waiting, which happens in real time.
type breaker struct {
	after time.Duration // 0: never open
	log   *slog.Logger

	open     atomic.Bool   // read by every decision without the lock
	opens    atomic.Uint64 // times it opened; read by metrics without the lock
	failures atomic.Int32  // in a row; read by every success without the lock

	mu        sync.Mutex
	since     time.Time // the first failure in the row
	nextProbe time.Time
	probing   bool
	err       error // what an open breaker answers
}

// admit reports whether a decision may go to Redis now, and whether it is
// the probe of an open breaker; if not, the error to answer with.
func (b *breaker) admit(now time.Time) (probe bool, err error) {
	if !b.open.Load() {
		return false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.open.Load():
		return false, nil
	case b.probing || now.Before(b.nextProbe):
		return false, b.err
	}
	b.probing = true
	return true, nil
}

// success records a decision Redis answered.
func (b *breaker) success(probe bool) {
	if !probe && b.failures.Load() == 0 && !b.open.Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures.Store(0)
	if probe {
		b.probing = false
	}
	if b.open.Load() {
		b.open.Store(false)
		b.log.Info("redlimit: Redis answers again; decisions resume")
	}
}

// failure records a decision that failed with err at now.
func (b *breaker) failure(now time.Time, probe bool, err error) {
	if b.after <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open.Load() {
		if probe {
			b.probing = false
			b.nextProbe = now.Add(breakerProbeInterval)
		}
		return
	}
	if b.failures.Add(1) == 1 {
		b.since = now
	}
	failing := now.Sub(b.since)
	if b.failures.Load() < breakerMinFailures || failing < b.after {
		return
	}
	// The last error's text, not the error: a decision answered at once is
	// not, say, a timeout.
	b.err = fmt.Errorf("%w: every decision failed for %v, the last with: %v",
		ErrUnavailable, failing.Round(time.Millisecond), err)
	b.nextProbe = now.Add(breakerProbeInterval)
	b.probing = false
	b.opens.Add(1) // first, so that whoever sees it open then counts this opening
	b.open.Store(true)
	b.log.Warn("redlimit: Redis is failing; decisions fail fast until a probe succeeds",
		"failing_for", failing.Round(time.Millisecond), "failures", b.failures.Load(),
		"probe_every", breakerProbeInterval, "error", err)
}

// release ends a probe that proved nothing (its caller left).
func (b *breaker) release(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}
