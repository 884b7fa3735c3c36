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
// ends, or n can never be admitted: for workers and outgoing calls that
// share one rate across processes. Each try is one decision; after a
// denial it sleeps RetryAfter (at least 1 ms, plus a random eighth, at
// most 50 ms more) and tries again, so waiters are not queued and each
// admitted event costs about one decision per waiter. After a shaping
// LeakyBucket admits the events, it sleeps their Delay before returning.
//
// It returns nil once the events are admitted; at once, the errors AllowN
// returns for an invalid key, limit or cost, or an error wrapping
// ErrInvalidCost for an n above the limit's burst; the error of a failed
// decision (it does not retry Redis failures); ctx.Err() once ctx ends; or,
// when ctx's deadline comes before the next try, an error wrapping
// context.DeadlineExceeded at once. n = 0 returns nil. No goroutine is
// started. It is safe for concurrent use.
func (l *Limiter) WaitN(ctx context.Context, key string, limit Limit, n int) error {
	if err := l.checkWait(key, limit, n); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	var s sleeper
	defer s.stop()
	for {
		res, err := l.AllowN(ctx, key, limit, n)
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			return err
		}
		pause, done, err := waitPause(res, limit, n)
		if done || err != nil {
			return err
		}
		jitter, late := waitJitter(ctx, res.Allowed, pause)
		if late {
			return &deadlineError{key: key, limit: limit, n: n, pause: pause, admitted: res.Allowed}
		}
		if err := s.sleep(ctx, pause+jitter); err != nil {
			return err
		}
		if res.Allowed {
			return nil // slept the shaping Delay
		}
	}
}

// checkWait returns WaitN's error for arguments it refuses at once: an
// invalid key or limit, a negative n, or an n above the limit's burst.
func (l *Limiter) checkWait(key string, limit Limit, n int) error {
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
	return nil
}

// waitPause says what a try's result res means for WaitN: done when the
// events are admitted with nothing to wait; an error when they can never
// be; else the pause before returning (an admitted event's shaping Delay)
// or before the next try (RetryAfter, at least minWaitPause).
func waitPause(res Result, limit Limit, n int) (pause time.Duration, done bool, err error) {
	switch {
	case res.Allowed && res.Delay <= 0:
		return 0, true, nil
	case res.Allowed:
		return res.Delay, false, nil // exact: the place in the queue
	case res.RetryAfter == InfDuration:
		return 0, false, errNeverAdmitted(limit, n)
	default:
		return max(res.RetryAfter, minWaitPause), false, nil
	}
}

// waitJitter returns the random extra to add to pause after a denial (up
// to 1/waitJitterDiv of it, at most waitJitterMax; none after an
// admission, nor when it would pass ctx's deadline), or late when pause
// itself would pass the deadline.
func waitJitter(ctx context.Context, admitted bool, pause time.Duration) (jitter time.Duration, late bool) {
	if !admitted {
		jitter = rand.N(min(pause/waitJitterDiv, waitJitterMax))
	}
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline)
		if pause >= left {
			return 0, true
		}
		if pause+jitter >= left {
			jitter = 0
		}
	}
	return jitter, false
}

// sleeper sleeps WaitN's pauses on one timer, made at the first pause and
// reused.
type sleeper struct{ timer *time.Timer }

// sleep waits d, or until ctx ends, then returning ctx.Err().
func (s *sleeper) sleep(ctx context.Context, d time.Duration) error {
	if s.timer == nil {
		s.timer = time.NewTimer(d)
	} else {
		s.timer.Reset(d) // since Go 1.23, no stale tick survives Reset
	}
	select {
	case <-s.timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop stops the timer, if one was made.
func (s *sleeper) stop() {
	if s.timer != nil {
		s.timer.Stop()
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
