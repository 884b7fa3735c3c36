package core

import (
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// denyCache remembers decisions Redis has just denied, so that the same
// request is answered in process until the denial's RetryAfter has passed.
// That is exact: a denial consumes nothing, and only time frees allowance,
// so a request of at least the same cost before then would be denied too.
// What else frees allowance, a Reset or a raised limit, is seen at once
// through this Limiter (a Reset makes every entry holding its key stale;
// the Limit is part of the entry) and within maxAge through any other.
//
// An entry is keyed by the Redis keys of the decision's limits, so a
// decision of several limits has its own entry, holding every limit's
// answer. The LRUs are hashicorp/golang-lru/v2: bounded, safe for
// concurrent use, and their Peek takes only a read lock. It pays:
// bench/cmd/compare deny-cache against deny-nocache, a key already denied
// answered 18–180× faster than by Redis (issue 33, docs/performance.md).
type denyCache struct {
	entries *lru.Cache[string, *denial]
	maxAge  time.Duration

	// Resets: each one takes the next sequence number, recorded under its
	// key; an entry holding that key whose decision was sent before is
	// stale. Records pushed out of the bounded LRU raise floor, below which
	// every entry is stale, so forgetting a reset is never unsafe.
	seq    atomic.Uint64
	resets *lru.Cache[string, uint64]
	floor  atomic.Uint64
}

// denial is what Redis answered for one decision.
type denial struct {
	seq     uint64   // the last reset before the decision was sent
	keys    []string // one per term
	terms   []deniedTerm
	retryAt time.Time // the first retryAt of a denying term: the answer may change from here on
	expires time.Time // retryAt, or sooner by maxAge: ask Redis again from here on
	// refreshing is set for the one caller that asks Redis again once the
	// entry has expired but not reached retryAt; meanwhile the others keep
	// the answer, which only another process can have changed.
	refreshing atomic.Bool
}

// denyQuery is a decision as the deny cache compares it: per limit, the
// state's key, the limit and the cost (1 for a limit that takes up to its
// cost).
type denyQuery struct {
	keys   []string
	limits []Limit
	costs  []int
}

type deniedTerm struct {
	limit                    Limit
	cost                     int
	allowed                  bool
	remaining                int
	retryAt, resetAt, nextAt time.Time
}

func newDenyCache(keys int, maxAge time.Duration) *denyCache {
	c := &denyCache{maxAge: maxAge}
	var err error
	if c.entries, err = lru.New[string, *denial](keys); err != nil { // only for keys <= 0
		panic(err)
	}
	c.resets, err = lru.NewWithEvict(keys, func(_ string, seq uint64) {
		for {
			floor := c.floor.Load()
			if seq <= floor || c.floor.CompareAndSwap(floor, seq) {
				return
			}
		}
	})
	if err != nil {
		panic(err)
	}
	return c
}

// sent returns the sequence number a decision sent now records.
func (c *denyCache) sent() uint64 { return c.seq.Load() }

// get answers the decision q, whose entry is id (decision.cacheID), at
// now into results (one per limit) if Redis denied it, at costs no
// higher, moments ago and the denial still holds. RetryAfter counts down
// to the denied costs' instants, so for higher costs it is a lower bound.
//
// Once an entry is older than maxAge, one caller is sent to Redis to
// refresh it (refresh is true) while the others keep the answer, for at
// most another maxAge: a flood on a denied key sends Redis one decision
// per maxAge, not a burst of every waiting caller. From the entry's
// retryAt on, every caller asks.
func (c *denyCache) get(id string, q denyQuery, now time.Time, results []Result) (ok, refresh bool) {
	e, found := c.entries.Peek(id)
	if !found || !now.Before(e.retryAt) || len(e.terms) != len(q.limits) || !c.fresh(e) {
		return false, false
	}
	for i, t := range e.terms {
		if q.keys[i] != e.keys[i] || q.limits[i] != t.limit || q.costs[i] < t.cost {
			return false, false
		}
	}
	if !now.Before(e.expires) {
		if !now.Before(e.expires.Add(c.maxAge)) { // the refresh failed: everyone asks
			return false, false
		}
		if e.refreshing.CompareAndSwap(false, true) {
			return false, true
		}
	}
	for i, t := range e.terms {
		results[i] = Result{Limit: t.limit, Allowed: t.allowed, Remaining: t.remaining,
			ResetAfter: max(0, t.resetAt.Sub(now)), NextAfter: max(0, t.nextAt.Sub(now)), Cached: true}
		if !t.allowed {
			results[i].RetryAfter = t.retryAt.Sub(now)
		}
	}
	return true, false
}

// fresh reports whether no key of d has been reset since d was sent.
func (c *denyCache) fresh(e *denial) bool {
	if e.seq < c.floor.Load() {
		return false
	}
	if c.resets.Len() == 0 {
		return true
	}
	for _, k := range e.keys {
		if s, ok := c.resets.Peek(k); ok && s > e.seq {
			return false
		}
	}
	return true
}

// add remembers, as the entry id, that Redis denied the decision q, sent
// at `sent` (the Limiter's clock, read before the request left, so no
// later than Redis's) after reset number seq, with results.
func (c *denyCache) add(id string, q denyQuery, sent time.Time, seq uint64, results []Result) {
	e := &denial{seq: seq, keys: append([]string(nil), q.keys...), terms: make([]deniedTerm, len(q.limits)),
		retryAt: sent.Add(InfDuration / 2)}
	for i, r := range results {
		if !r.Allowed {
			if r.RetryAfter <= 0 || r.RetryAfter == InfDuration {
				return // nothing to wait for, or never: not worth remembering
			}
			e.retryAt = minTime(e.retryAt, sent.Add(r.RetryAfter))
		}
		e.terms[i] = deniedTerm{limit: q.limits[i], cost: q.costs[i], allowed: r.Allowed,
			remaining: r.Remaining, retryAt: sent.Add(r.RetryAfter), resetAt: sent.Add(r.ResetAfter),
			nextAt: sent.Add(r.NextAfter)}
	}
	e.expires = minTime(e.retryAt, sent.Add(c.maxAge))
	c.entries.Add(id, e)
}

// forget drops the entry of id: a refresh found the decision allowed.
func (c *denyCache) forget(id string) { c.entries.Remove(id) }

// reset records a reset of key: every entry holding it that was sent
// before is stale from now on.
func (c *denyCache) reset(key string) {
	c.resets.Add(key, c.seq.Add(1))
	c.entries.Remove(key)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
