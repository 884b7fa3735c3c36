package core

import (
	"context"
	"github.com/redlimit/redlimit/internal/transport"
	"sync"
	"sync/atomic"
	"time"
)

// A settlement that fails (a timeout, a lost connection, an open breaker)
// may not have freed the Concurrency slots its Reservation holds, which
// would then stay held until their lease ends: a stall of a second could
// block a key for the whole lease. So may a reserving decision that fails
// after it may have reached Redis (its caller's context ended or its
// timeout passed while it was on its way, or its reply was lost): its
// script may have taken slots that nobody will free. Freeing slots is
// idempotent (the settlement script removes the reservation's own
// members; removing them twice removes nothing more), and a release that
// finds none of them leaves a record that makes its decision, should it
// reach Redis later, take nothing (lua/concurrency.lua); so the Limiter
// frees them in the background. Only the slots: a refund or a charge to
// the other limits is not idempotent and stays sent at most once, and a
// decision that may have run may have counted.
//
// One goroutine per Limiter does it (releaser.run), started when a failed
// settlement holds slots and stopped when nothing is left to retry. It
// tries each release after releaseFirstWait, then doubling up to
// releaseMaxWait, each try bounded by releaseTimeout (or the Limiter's
// longer timeout), until Redis answers or the slots' lease ends: nothing
// outlives it. At most releaseQueue releases wait; more are abandoned.

// Retrying releases.
const (
	releaseQueue     = 1024                   // most releases waiting to be retried, per Limiter
	releaseFirstWait = 50 * time.Millisecond  // the first retry comes this long after the failure
	releaseMaxWait   = time.Second            // the longest wait between retries
	releaseTimeout   = 500 * time.Millisecond // bounds one retry, unless the Limiter's timeout is longer
)

// releaser retries the release of the slots of failed settlements and
// decisions.
type releaser struct {
	failed, unanswered, retried, abandoned atomic.Uint64 // Stats

	mu      sync.Mutex
	queue   []*pending // unordered; at most releaseQueue
	running bool       // a goroutine runs the queue
	wake    chan struct{}
}

// pending is a release waiting to be retried.
type pending struct {
	r     *Reservation
	due   time.Time     // its next try
	wait  time.Duration // between its last try and the next
	until time.Time     // its slots' lease ends, on the process's clock
}

// settleFailed records that r's settlement failed with err and, if r holds
// slots and err does not say that they cannot be freed (an error about
// the call itself, such as WRONGTYPE), has them freed in the background.
func (l *Limiter) settleFailed(r *Reservation, err error) {
	l.releaser.failed.Add(1)
	if !r.holds {
		return
	}
	if transport.RequestError(err) { // it would fail again
		l.releaser.abandoned.Add(1)
		return
	}
	l.releaseLater(r, r.leaseLeft(l.now()))
}

// unanswered records that the reserving decision of d, whose slots r
// names, failed with err; if the decision may have reached Redis and
// taken slots (mayHaveRun), they are freed in the background, a lease
// from now at the latest.
func (l *Limiter) unanswered(d *decision, err error) {
	if !d.holds || d.rid == "" || !l.tr.MayHaveRun(err) {
		return
	}
	l.releaser.unanswered.Add(1)
	r := newReservation(l, d, 0, make([]Result, d.k))
	r.unknown = true
	l.releaseLater(r, r.lease())
}

// releaseLater queues the release of r's slots, to be tried within left.
func (l *Limiter) releaseLater(r *Reservation, left time.Duration) {
	rl := &l.releaser
	now := time.Now()
	p := &pending{r: r, due: now.Add(releaseFirstWait), wait: releaseFirstWait, until: now.Add(left)}
	if !p.due.Before(p.until) {
		rl.abandoned.Add(1) // the lease ends first, and frees the slots
		return
	}
	rl.mu.Lock()
	if len(rl.queue) >= releaseQueue {
		rl.mu.Unlock()
		rl.abandoned.Add(1)
		return
	}
	rl.queue = append(rl.queue, p)
	start := !rl.running
	rl.running = true
	if rl.wake == nil {
		rl.wake = make(chan struct{}, 1)
	}
	rl.mu.Unlock()
	if start {
		go l.retryReleases()
	} else {
		select { // a sleeping goroutine looks at the queue again
		case rl.wake <- struct{}{}:
		default:
		}
	}
}

// retryReleases tries every release that is due, then sleeps until the
// next one is, and returns when none is left.
func (l *Limiter) retryReleases() {
	rl := &l.releaser
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []*pending
	for {
		now := time.Now()
		next := time.Time{}
		rl.mu.Lock()
		due = due[:0]
		kept := rl.queue[:0]
		for _, p := range rl.queue {
			switch {
			case !p.due.After(now):
				due = append(due, p)
			default:
				kept = append(kept, p)
				if next.IsZero() || p.due.Before(next) {
					next = p.due
				}
			}
		}
		clear(rl.queue[len(kept):])
		rl.queue = kept
		if len(due) == 0 && len(kept) == 0 {
			rl.running = false
			rl.mu.Unlock()
			return
		}
		rl.mu.Unlock()

		for _, p := range due {
			l.retryRelease(p)
		}
		if len(due) > 0 {
			continue // the tries took time, and may have queued more
		}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-rl.wake:
			timer.Stop()
		}
	}
}

// retryRelease tries p once: done if Redis answers or the release cannot
// succeed; else it goes back in the queue, to be tried after twice the
// wait, unless the lease ends first.
func (l *Limiter) retryRelease(p *pending) {
	rl := &l.releaser
	now := time.Now()
	if !now.Before(p.until) {
		rl.abandoned.Add(1)
		return
	}
	deadline := now.Add(max(releaseTimeout, l.timeout))
	if p.until.Before(deadline) {
		deadline = p.until
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	_, err := l.run(ctx, p.r.releaseCall(l.now()))
	cancel()
	switch {
	case err == nil:
		rl.retried.Add(1)
		if l.deny != nil {
			for _, key := range p.r.keys {
				l.deny.reset(key)
			}
		}
		return
	case transport.RequestError(err):
		rl.abandoned.Add(1)
		return
	}
	p.wait = min(2*p.wait, releaseMaxWait)
	p.due = time.Now().Add(p.wait)
	if !p.due.Before(p.until) {
		rl.abandoned.Add(1)
		return
	}
	rl.mu.Lock()
	rl.queue = append(rl.queue, p)
	rl.mu.Unlock()
}

// releaseCall returns the settlement script call that frees r's slots and
// nothing else: its Concurrency limits alone, each with the reserved cost
// (a delta of 0), laid out as Settle lays out its call.
func (r *Reservation) releaseCall(now time.Time) *transport.Call {
	var at []int
	for i, info := range r.infos {
		if info.d.holds {
			at = append(at, i)
		}
	}
	return r.settleCall(at, r.cost, now)
}

// leaseLeft returns how long r's slots are held at most from now (the
// Limiter's clock): until the shortest lease of its Concurrency limits
// ends, counted from the decision's clock, between 0 and that lease.
func (r *Reservation) leaseLeft(now time.Time) time.Duration {
	lease := r.lease()
	return min(lease, max(0, lease-now.Sub(time.UnixMicro(r.at))))
}

// lease returns the shortest lease of r's Concurrency limits.
func (r *Reservation) lease() time.Duration {
	lease := time.Duration(0)
	for _, info := range r.infos {
		if info.lease > 0 && (lease == 0 || info.lease < lease) {
			lease = info.lease
		}
	}
	return lease
}
