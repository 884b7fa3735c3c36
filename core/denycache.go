package core

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Deny cache defaults.
const (
	// DefaultDenyCacheKeys is how many denied keys a Limiter remembers
	// unless WithDenyCache says otherwise. An entry takes about 350 bytes
	// with a 40-byte key, so the default holds under 4 MB.
	DefaultDenyCacheKeys = 10_000
	// DefaultDenyCacheMaxAge bounds how long a denial is answered locally
	// unless WithDenyCacheMaxAge says otherwise.
	DefaultDenyCacheMaxAge = time.Second
)

// denyCache remembers keys Redis has just denied, so that requests for them
// are answered in process until the denial's RetryAfter has passed. That is
// exact: a denial consumes nothing, and only time frees allowance, so a
// request of at least the same cost before then would be denied too. What
// else frees allowance, a Reset or a raised limit, is seen at once through
// this Limiter (Reset forgets the key; the Limit is part of the entry) and
// within maxAge through any other.
//
// The LRU is hashicorp/golang-lru/v2: bounded, safe for concurrent use,
// and its Peek takes only a read lock, which every decision does.
type denyCache struct {
	lru    *lru.Cache[string, denial]
	maxAge time.Duration
}

// denial is what Redis answered for one key.
type denial struct {
	limit     Limit
	cost      int
	remaining int
	retryAt   time.Time // cost fits again from here on
	resetAt   time.Time
	expires   time.Time // retryAt, or sooner by maxAge
}

func newDenyCache(keys int, maxAge time.Duration) *denyCache {
	c, err := lru.New[string, denial](keys)
	if err != nil { // only for keys <= 0, which New never passes
		panic(err)
	}
	return &denyCache{lru: c, maxAge: maxAge}
}

// get answers a request of cost under l for key at now if Redis denied at
// least as much for it under the same limit and the denial still holds.
// RetryAfter counts down to the denied cost's instant, so for a higher cost
// it is a lower bound.
func (c *denyCache) get(key string, l Limit, cost int, now time.Time) (Result, bool) {
	d, ok := c.lru.Peek(key)
	if !ok || cost < d.cost || !now.Before(d.expires) || d.limit != l {
		return Result{}, false
	}
	return Result{
		Limit:      l,
		Remaining:  d.remaining,
		RetryAfter: d.retryAt.Sub(now),
		ResetAfter: max(0, d.resetAt.Sub(now)),
		Cached:     true,
	}, true
}

// add remembers that Redis denied cost for key with res, asked at sent (the
// Limiter's clock, read before the request left, so no later than Redis's).
func (c *denyCache) add(key string, cost int, sent time.Time, res Result) {
	if res.RetryAfter <= 0 || res.RetryAfter == InfDuration {
		return
	}
	retryAt := sent.Add(res.RetryAfter)
	c.lru.Add(key, denial{
		limit:     res.Limit,
		cost:      cost,
		remaining: res.Remaining,
		retryAt:   retryAt,
		resetAt:   sent.Add(res.ResetAfter),
		expires:   minTime(retryAt, sent.Add(c.maxAge)),
	})
}

// forget drops what is remembered for key.
func (c *denyCache) forget(key string) { c.lru.Remove(key) }

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
