package core

import (
	"context"

	"github.com/redlimit/redlimit/internal/engine"
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
	return l.e().WaitN(ctx, key, engine.Limit(limit), n)
}
