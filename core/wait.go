package core

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// How WaitN paces its tries.
const (
	// minWaitPause is the shortest pause between two tries of WaitN,
	// whatever RetryAfter says: a denial whose RetryAfter is 0 or a few
	// microseconds must not make a waiter spin.
	minWaitPause = time.Millisecond
	// waitJitterDiv and waitJitterMax bound the random extra added to a
	// pause: up to 1/waitJitterDiv of it, and at most waitJitterMax.
	waitJitterDiv = 8
	waitJitterMax = 50 * time.Millisecond
)

// Wait is WaitN(ctx, key, limit, 1).
func (l *Limiter) Wait(ctx context.Context, key string, limit Limit) error {
	return l.WaitN(ctx, key, limit, 1)
}

// WaitN blocks until n events for key are admitted under limit, or ctx
// ends, or n can never be admitted. It is for workers and outgoing calls
// that must share one rate across processes: every Limiter, in every
// process, that waits on the same key under the same limit through one
// Redis shares the limit's rate. It returns nil once the n events are
// admitted and counted. It is safe for concurrent use by multiple
// goroutines, as every Limiter method is.
//
// Each try is one decision, as AllowN makes it: one round trip to Redis,
// or an answer from the deny cache (WithDenyCache), whose RetryAfter counts
// down to the instant Redis named, so a waiter wakes exactly then rather
// than asking again early. After a denial WaitN sleeps RetryAfter and tries
// again. It never wakes before RetryAfter, only later: the pause is at
// least 1 ms (so a RetryAfter of 0 cannot make it spin), plus a random
// extra of up to an eighth of the pause, and at most 50 ms, so that
// waiters denied together, in one process or many, do not all ask again
// at the same instant, and which of them gets the next event depends less
// on which is closest to Redis. Waiters are not queued: each tries
// on its own, so under contention each admitted event costs about one
// decision per waiter, and the order of admission is not the order of
// arrival. A shaping LeakyBucket (Limit.Shape) queues instead: each
// waiter is admitted at its first try, with its place in the queue.
//
// When the admitting Result has a Delay (a shaping LeakyBucket), WaitN
// also sleeps Delay before it returns, so that the caller's events happen
// at their place in the queue, Period/Rate apart.
//
// No goroutine is started per wait; a sleep is a timer, stopped when
// WaitN returns. Sleeps are in real time, also under WithClock, whose
// clock must then move in real time for waiters to progress.
//
// Errors. An invalid key, an invalid limit or a negative n is the error
// AllowN returns, at once (ErrInvalidKey, ErrInvalidLimit, ErrInvalidCost).
// An n above the limit's burst (Limit.Capacity) can never be admitted:
// the error wraps ErrInvalidCost, at once, and nothing is sent to Redis.
// n = 0 returns nil without asking Redis. A decision that fails (Redis
// errors, ErrTimeout, ErrUnavailable) ends the wait with AllowN's error:
// WaitN does not retry, so the caller decides whether to fail or go on.
// Once ctx has ended, before or during a try or a sleep, WaitN returns
// ctx.Err() itself. When ctx has a deadline that comes before the next try
// (or before the end of a shaping Delay), WaitN returns at once, instead
// of sleeping in vain, an error that wraps context.DeadlineExceeded (and
// not ErrTimeout, which tells a decision that outlived its timeout). After
// a shaping limit has admitted the events, they stay counted whatever the
// error: their place in the queue is taken.
func (l *Limiter) WaitN(ctx context.Context, key string, limit Limit, n int) error {
	if err := l.checkKey(key); err != nil {
		return err
	}
	if err := limit.Validate(); err != nil {
		return err
	}
	switch {
	case n < 0:
		return fmt.Errorf("%w: n=%d must not be negative", ErrInvalidCost, n)
	case n > limit.Capacity():
		return errNeverAdmitted(limit, n)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}

	var timer *time.Timer // made at the first sleep, reused, stopped on return
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		res, err := l.AllowN(ctx, key, limit, n)
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			return err
		}

		var pause time.Duration
		switch {
		case res.Allowed && res.Delay <= 0:
			return nil
		case res.Allowed:
			pause = res.Delay // exact: the place in the queue
		case res.RetryAfter == InfDuration:
			return errNeverAdmitted(limit, n)
		default:
			pause = max(res.RetryAfter, minWaitPause)
		}

		jitter := time.Duration(0)
		if !res.Allowed {
			jitter = rand.N(min(pause/waitJitterDiv, waitJitterMax))
		}
		if deadline, ok := ctx.Deadline(); ok {
			left := time.Until(deadline)
			if pause >= left {
				return &deadlineError{key: key, limit: limit, n: n, pause: pause, admitted: res.Allowed}
			}
			if pause+jitter >= left {
				jitter = 0
			}
		}

		if timer == nil {
			timer = time.NewTimer(pause + jitter)
		} else {
			timer.Reset(pause + jitter) // since Go 1.23, no stale tick survives Reset
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		if res.Allowed {
			return nil // slept the shaping Delay
		}
	}
}

// errNeverAdmitted is WaitN's error for a cost above the limit's burst.
func errNeverAdmitted(limit Limit, n int) error {
	return fmt.Errorf("%w: WaitN(n=%d) exceeds the burst %d of %v: it can never be admitted",
		ErrInvalidCost, n, limit.Capacity(), limit)
}

// deadlineError is WaitN's error when its context's deadline comes before
// the events could be admitted, or served (a shaping Delay).
type deadlineError struct {
	key      string
	limit    Limit
	n        int
	pause    time.Duration
	admitted bool
}

func (e *deadlineError) Error() string {
	if e.admitted {
		return fmt.Sprintf("redlimit: WaitN(n=%d) for %q under %v: admitted, but its place in the queue, %v away, is past the context's deadline",
			e.n, e.key, e.limit, e.pause)
	}
	return fmt.Sprintf("redlimit: WaitN(n=%d) for %q under %v: the next try, %v away, would be past the context's deadline",
		e.n, e.key, e.limit, e.pause)
}

// Unwrap lets errors.Is find context.DeadlineExceeded.
func (e *deadlineError) Unwrap() error { return context.DeadlineExceeded }
