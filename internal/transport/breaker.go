package transport

import (
	"context"
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
	breakerProbeInterval = 250 * time.Millisecond // how often an open breaker probes Redis
	breakerProbeIdle     = 2 * time.Second        // an open breaker nobody asked for this long stops probing
	breakerProbeTimeout  = time.Second            // bounds a probe (go-redis's own timeouts may bound it later)
)

// breaker fails decisions fast while one Redis server keeps failing; there
// is one per lane (lane.go). It opens once decisions have failed (an
// error or a timeout) for `after` with no success in between, and at least
// breakerMinFailures of them. While open, every decision fails at once with
// ErrUnavailable, and the breaker probes the server itself, in a goroutine
// of its own, every breakerProbeInterval (lane.probe): no caller's decision
// waits on a server that is down. The first probe answered closes it. The
// prober stops when nobody has asked the breaker for breakerProbeIdle, and
// starts again with the next decision. A caller's own context ending is not
// Redis's failure and counts for nothing. Time is the process's clock, not
// the Limiter's: the breaker is about waiting, which happens in real time.
type breaker struct {
	after  time.Duration                   // 0: never open
	log    *slog.Logger                    //
	where  string                          // " at ADDR" on a Cluster or Ring, for messages
	probe  func(ctx context.Context) error // asks the server whether it answers
	probed func()                          // after each failed probe (a Cluster's slot map reload)
	// unavailable is Config.ErrUnavailable, which an open breaker's
	// answers wrap
	unavailable error

	open     atomic.Bool   // read by every decision without the lock
	opens    atomic.Uint64 // times it opened; read by metrics without the lock
	failures atomic.Int32  // in a row; read by every success without the lock
	probing  atomic.Bool   // a prober runs
	asked    atomic.Int64  // unix ns of the last decision the open breaker refused
	err      atomic.Pointer[error]

	mu    sync.Mutex
	since time.Time // the first failure in the row
}

// admit returns nil if a decision may go to Redis now, or else the error
// to answer with at once; it makes sure an open breaker probes.
func (b *breaker) admit() error {
	if !b.open.Load() {
		return nil
	}
	b.asked.Store(time.Now().UnixNano())
	err := b.err.Load()
	if !b.open.Load() { // closed meanwhile
		return nil
	}
	if b.probing.CompareAndSwap(false, true) {
		go b.prober()
	}
	return *err
}

// prober probes the server every breakerProbeInterval until a probe is
// answered, which closes the breaker, or nobody asked for breakerProbeIdle.
func (b *breaker) prober() {
	for {
		time.Sleep(breakerProbeInterval)
		if time.Since(time.Unix(0, b.asked.Load())) > breakerProbeIdle {
			b.probing.Store(false)
			// A decision may have been refused between the check and the
			// store, and seen a prober running: take over again if so.
			if time.Since(time.Unix(0, b.asked.Load())) > breakerProbeIdle || !b.probing.CompareAndSwap(false, true) {
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), breakerProbeTimeout)
		err := b.probe(ctx)
		cancel()
		if err == nil {
			b.success()
			b.probing.Store(false)
			return
		}
		b.mu.Lock()
		b.setErr(time.Since(b.since), fmt.Errorf("a probe: %w", err))
		b.mu.Unlock()
		if b.probed != nil {
			b.probed()
		}
	}
}

// success records a decision or a probe Redis answered.
func (b *breaker) success() {
	if b.failures.Load() == 0 && !b.open.Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures.Store(0)
	if b.open.Load() {
		b.open.Store(false)
		b.log.Info("redlimit: Redis answers again; decisions resume", "where", b.where)
	}
}

// failure records a decision that failed with err at now.
func (b *breaker) failure(now time.Time, err error) {
	if b.after <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open.Load() {
		return
	}
	if b.failures.Add(1) == 1 {
		b.since = now
	}
	failing := now.Sub(b.since)
	if b.failures.Load() < breakerMinFailures || failing < b.after {
		return
	}
	b.setErr(failing, err)
	b.opens.Add(1) // first, so that whoever sees it open then counts this opening
	b.open.Store(true)
	b.log.Warn("redlimit: Redis is failing; decisions fail fast until a probe succeeds",
		"where", b.where, "failing_for", failing.Round(time.Millisecond), "failures", b.failures.Load(),
		"probe_every", breakerProbeInterval, "error", err)
}

// setErr sets what an open breaker answers: the last error's text, not the
// error, since a decision answered at once is not, say, a timeout. The
// caller holds b.mu.
func (b *breaker) setErr(failing time.Duration, last error) {
	err := fmt.Errorf("%w: every decision failed for %v, the last with: %v",
		b.unavailable, failing.Round(time.Millisecond), last)
	if b.where != "" {
		err = fmt.Errorf("%w: Redis%s has failed for %v, the last with: %v",
			b.unavailable, b.where, failing.Round(time.Millisecond), last)
	}
	b.err.Store(&err)
}
