package core

import (
	"context"
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/redlimit/redlimit/internal/transport"
	"github.com/redlimit/redlimit/internal/wire"
)

// State is a key's state under one limit, as Look reads it.
type State struct {
	// Result is what a decision of cost 0 reports, which counts nothing:
	// Remaining (the free slots of a Concurrency limit), ResetAfter and
	// NextAfter. Allowed is false only while the key is in debt, and
	// RetryAfter is then the time until the debt is paid and one event
	// fits again.
	Result
	// Key is the name of the Redis key that holds the state, as the
	// Limiter names it (its prefix, the scope, the key; see WithPrefix).
	// A key at its full allowance may have none in Redis.
	Key string
	// Held is, for a Concurrency limit, how many slots are held (Capacity
	// less Remaining); 0 for other limits.
	Held int
	// Debt is how many events (in the limit's unit) the state counts
	// beyond the limit's capacity, which a settlement charged above what
	// was left (docs/lifecycle.md): 0 when there is no debt. While there
	// is, Remaining is 0 and every decision of the key is denied. For the
	// meters (GCRA, TokenBucket, LeakyBucket) whose state counts time, it
	// is worked out from how long the debt takes to drain, rounded up.
	Debt int
}

// Look reads the state of q.Key under each of q.Limits, each in its scope
// (q.Scopes), in one round trip, and changes nothing: no key is written,
// created, deleted or given a new time to live. It is what a decision of
// cost 0 reports, with more said (State). Concurrency limits may be read
// as others; q.N, q.Costs, q.TakeRest, q.Reserve and q.Each are ignored.
// The deny cache and prefetched allowance are not consulted: every State
// is Redis's. Errors are those of Decide. It is safe for concurrent use;
// it is meant for tools and support, not for the request path.
func (l *Limiter) Look(ctx context.Context, q *Request) ([]State, error) {
	d := decision{}
	if err := l.prepare(&d, &Request{Key: q.Key, Limits: q.Limits, Scopes: q.Scopes}); err != nil {
		return nil, err
	}
	now := l.now()
	c := transport.NewCall(scriptOf(d.infos[:d.k]), wire.Decide, d.keys[:d.k]...)
	c.Args = wire.AppendDecision(c.Args, l.wireClock(now), "", 0)
	for _, info := range d.infos[:d.k] {
		c.Args = info.appendArgs(wire.AppendLimit(c.Args, 0, false), now)
	}
	reply, err := l.run(ctx, c)
	var buf [MaxLimits]wire.Limit
	if err == nil {
		_, err = wire.ReadDecision(reply, buf[:d.k])
	}
	if err != nil {
		return nil, fmt.Errorf("redlimit: look at %s state of %q: %w", d.algorithms(), strings.Clone(q.Key), err)
	}
	states := make([]State, d.k)
	for i, r := range buf[:d.k] {
		limit, info := q.Limits[i], d.infos[i]
		s := State{Key: d.keys[i], Result: Result{Limit: limit, Allowed: r.Allowed, Remaining: max(0, r.Remaining),
			RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter, NextAfter: r.NextAfter}}
		switch {
		case info.d.holds:
			s.Held = info.capacity - r.Remaining
		case r.Remaining < 0: // a window or a bucket counts its debt
			s.Debt = -r.Remaining
		case !r.Allowed: // a cost of 0 is denied only in debt: GCRA's, counted in time
			s.Debt = drained(r.RetryAfter, limit)
		}
		states[i] = s
	}
	return states, nil
}

// drained returns how many events of limit drain in d, rounded up, at
// least 1.
func drained(d time.Duration, limit Limit) int {
	hi, lo := bits.Mul64(uint64(d/time.Microsecond), uint64(limit.Rate))
	period := uint64(limit.Period / time.Microsecond)
	if hi >= period { // more than 2^64 events: not a count any limit holds
		return MaxCount
	}
	n, rem := bits.Div64(hi, lo, period)
	if rem > 0 {
		n++
	}
	return int(min(max(n, 1), uint64(MaxCount)))
}

// ResetRequest forgets the state of q.Key under each of q.Limits, each in
// its scope (q.Scopes), in one round trip: Reset for the limits of a
// Request, such as those an HTTP policy keeps in its scope (its name;
// redlimit.Rules.States lists a rules table's). Each limit's key is back
// to its full allowance, and this Limiter's deny cache forgets every
// denial that involved one; other Limiters' forget theirs within their
// staleness bound (WithDenyCacheMaxAge). Concurrency slots held are freed
// as if their reservations had ended. q.N, q.Costs, q.TakeRest, q.Reserve
// and q.Each are ignored; errors are those of Decide. It is safe for
// concurrent use.
func (l *Limiter) ResetRequest(ctx context.Context, q *Request) error {
	d := decision{}
	if err := l.prepare(&d, &Request{Key: q.Key, Limits: q.Limits, Scopes: q.Scopes}); err != nil {
		return err
	}
	_, err := l.run(ctx, transport.NewCall(wire.Del, "", d.keys[:d.k]...)) // one hash tag: one slot
	for _, name := range d.keys[:d.k] {
		if l.deny != nil { // after the reset, so that denials sent meanwhile go too
			l.deny.reset(name)
		}
		l.forgetLeases(name)
	}
	if err != nil {
		return fmt.Errorf("redlimit: reset %s state of %q: %w", d.algorithms(), strings.Clone(q.Key), err)
	}
	return nil
}

// Window returns the calendar window of a limit on the calendar
// (Calendar set) that holds t: from its start (midnight, Monday midnight
// or the first of the month at midnight, in the limit's zone) to the next
// one, 23 or 25 hours apart for a day across a change of offset, 28 to 31
// days for a month. ok is false, and the times zero, for a limit not on
// the calendar or an invalid one. The scripts pick windows by the Redis
// clock, so near a boundary a process whose clock differs may see the
// other window.
func (l Limit) Window(t time.Time) (start, end time.Time, ok bool) {
	if l.Calendar == "" || l.Validate() != nil {
		return time.Time{}, time.Time{}, false
	}
	loc, err := zone(l.Calendar)
	if err != nil {
		return time.Time{}, time.Time{}, false
	}
	return windowStart(t, loc, l.Period, 0), windowStart(t, loc, l.Period, 1), true
}
